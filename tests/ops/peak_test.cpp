// ops::peak_gemm_size: the GEMM that measures a CPU's peak keeps the work per thread at 512^3; a GPU's is
// 8192^3. ops::published_peak: the datasheet table.
#include "meridian/ops/peak.h"

#include <gtest/gtest.h>

#include "meridian/comm/probe.h"

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

TEST(PublishedPeak, VoltaAndTuringInFp16) {
  EXPECT_DOUBLE_EQ(published_peak("Tesla V100-SXM2-16GB", true), 125e12);
  EXPECT_DOUBLE_EQ(published_peak("Tesla T4", true), 65e12);
  EXPECT_DOUBLE_EQ(published_peak("Tesla T4", false), 8.1e12);
}

// train.precision auto: bf16 from compute capability 8.0 (or a CPU with bf16 units), fp16 on 7.x,
// float32 below and on other CPUs; the reason names the device.
TEST(ChoosePrecision, FromTheDevicesFacts) {
  const comm::GpuInfo a100{"NVIDIA A100-SXM4-80GB", 0, 8, 0}, v100{"Tesla V100-SXM2-16GB", 0, 7, 0},
      t4{"Tesla T4", 0, 7, 5}, p100{"Tesla P100-PCIE-16GB", 0, 6, 0};
  EXPECT_EQ(choose_precision("cuda:0", &a100, false).precision, "bf16");
  EXPECT_EQ(choose_precision("cuda:1", &v100, false).precision, "fp16");
  EXPECT_EQ(choose_precision("cuda:0", &t4, false).precision, "fp16");
  EXPECT_EQ(choose_precision("cuda:0", &p100, false).precision, "float32");
  EXPECT_EQ(choose_precision("cuda:0", nullptr, false).precision, "float32");
  EXPECT_EQ(choose_precision("cpu", nullptr, true).precision, "bf16");
  EXPECT_EQ(choose_precision("cpu", nullptr, false).precision, "float32");
  const std::string why = choose_precision("cuda:1", &v100, false).why;
  EXPECT_NE(why.find("Tesla V100-SXM2-16GB (cuda:1) has compute capability 7.0"), std::string::npos) << why;
  // bf16 asked for: refused below 8.0, with fp16 named on 7.x.
  EXPECT_EQ(bf16_unsupported("cuda:0", a100), "");
  EXPECT_EQ(bf16_unsupported("cuda:0", t4),
            "Tesla T4 (cuda:0) has compute capability 7.5; bf16 needs 8.0 (Ampere) or newer: use fp16 (its tensor "
            "cores, with a dynamic loss scale; train.precision fp16 or auto)");
  EXPECT_EQ(bf16_unsupported("cuda:0", p100).find("fp16"), std::string::npos);
}

}  // namespace meridian::ops
