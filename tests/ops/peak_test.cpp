// ops::peak_gemm_size: the GEMM that measures a CPU's peak keeps the work per thread at 512^3; a GPU's is
// 8192^3. ops::published_peak: the datasheet table.
#include "meridian/ops/peak.h"

#include <gtest/gtest.h>

namespace meridian::ops {

TEST(PeakGemmSize, FiveTwelvePerThreadInStepsOf128OnACpu) {
  const c10::Device cpu(c10::kCPU);
  EXPECT_EQ(peak_gemm_size(cpu, 0), 512);  // no threads reported: as one
  EXPECT_EQ(peak_gemm_size(cpu, 1), 512);
  EXPECT_EQ(peak_gemm_size(cpu, 2), 640);   // 512 * 2^(1/3) = 645
  EXPECT_EQ(peak_gemm_size(cpu, 8), 1024);  // 512 * 2
  EXPECT_EQ(peak_gemm_size(cpu, 27), 1536);
  EXPECT_EQ(peak_gemm_size(cpu, 64), 2048);
  EXPECT_EQ(peak_gemm_size(cpu, 512), 2048);  // at most 2048^3
  EXPECT_EQ(peak_gemm_size(c10::Device(c10::kCUDA, 0), 1), 8192);
}

TEST(PublishedPeak, MoreSpecificNamesFirst) {
  EXPECT_DOUBLE_EQ(published_peak("NVIDIA H100 PCIe", true), 756e12);
  EXPECT_DOUBLE_EQ(published_peak("NVIDIA H100 80GB HBM3", true), 989.4e12);
  EXPECT_DOUBLE_EQ(published_peak("NVIDIA A10", false), 31.2e12);
  EXPECT_DOUBLE_EQ(published_peak("NVIDIA A100-SXM4-80GB", false), 19.5e12);
  EXPECT_EQ(published_peak("Some CPU", true), 0);
}

}  // namespace meridian::ops
