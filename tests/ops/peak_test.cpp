// ops::cpu_gemm_size: the GEMM that measures a CPU's peak keeps the work per thread at 512^3.
#include "meridian/ops/peak.h"

#include <gtest/gtest.h>

namespace meridian::ops {

TEST(CpuGemmSize, FiveTwelvePerThreadInStepsOf128) {
  EXPECT_EQ(cpu_gemm_size(0), 512);  // no threads reported: as one
  EXPECT_EQ(cpu_gemm_size(1), 512);
  EXPECT_EQ(cpu_gemm_size(2), 640);   // 512 * 2^(1/3) = 645
  EXPECT_EQ(cpu_gemm_size(8), 1024);  // 512 * 2
  EXPECT_EQ(cpu_gemm_size(27), 1536);
  EXPECT_EQ(cpu_gemm_size(64), 2048);
  EXPECT_EQ(cpu_gemm_size(512), 2048);  // at most 2048^3
}

TEST(PublishedPeak, MoreSpecificNamesFirst) {
  EXPECT_DOUBLE_EQ(published_peak("NVIDIA H100 PCIe", true), 756e12);
  EXPECT_DOUBLE_EQ(published_peak("NVIDIA H100 80GB HBM3", true), 989.4e12);
  EXPECT_DOUBLE_EQ(published_peak("NVIDIA A10", false), 31.2e12);
  EXPECT_DOUBLE_EQ(published_peak("NVIDIA A100-SXM4-80GB", false), 19.5e12);
  EXPECT_EQ(published_peak("Some CPU", true), 0);
}

}  // namespace meridian::ops
