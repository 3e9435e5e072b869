// comm::gpu_build_refusal over injected builds and GPUs: the architecture rule checked case by case
// against CUDA's compatibility rules, each refusal's wording (host, GPU, capability, driver, build, fix),
// and the tracks table as configured from jobs/torch-tracks.tsv.
#include "meridian/comm/gpu_build.h"

#include <gtest/gtest.h>

using meridian::comm::archs_run_on;
using meridian::comm::CudaBuild;
using meridian::comm::gpu_build_refusal;
using meridian::comm::GpuInfo;
using meridian::comm::NodeGpus;
using meridian::comm::parse_test_node_gpu;
using meridian::comm::torch_tracks;

namespace {
// The two tracks' libtorch_cuda architectures as torch._C._cuda_getArchFlags() lists them (docs/running.md).
const std::vector<std::string> kCu13Archs{"sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"};
const std::vector<std::string> kCu128Archs{"sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"};
const CudaBuild kCu13{"cu13", 13020, kCu13Archs};
const CudaBuild kCu128{"cu128", 12080, kCu128Archs};
GpuInfo gpu(const std::string& name, int major, int minor) {
  GpuInfo g;
  g.name = name;
  g.major = major;
  g.minor = minor;
  return g;
}
const GpuInfo kV100 = gpu("Tesla V100-SXM2-16GB", 7, 0), kT4 = gpu("Tesla T4", 7, 5),
              kA100 = gpu("NVIDIA A100-SXM4-40GB", 8, 0), kH100 = gpu("NVIDIA H100 80GB HBM3", 9, 0),
              kP100 = gpu("Tesla P100-PCIE-16GB", 6, 0), kL40 = gpu("NVIDIA L40S", 8, 9);
bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
}  // namespace

TEST(GpuBuild, TracksComeFromTheTable) {
  const auto& t = torch_tracks();
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].name, "cu13");
  EXPECT_EQ(t[0].cuda, 13020);
  EXPECT_EQ(t[0].driver, 580);
  EXPECT_EQ(t[0].cc, 75);
  EXPECT_EQ(t[1].name, "cu128");
  EXPECT_EQ(t[1].torch, "2.10.0");
  EXPECT_EQ(t[1].cuda, 12080);
  EXPECT_EQ(t[1].driver_cuda, 12000);
  EXPECT_EQ(t[1].driver, 525);
  EXPECT_EQ(t[1].full_driver, 570);
  EXPECT_EQ(t[1].cc, 70);
}

TEST(GpuBuild, ArchitecturesFollowCudasCompatibilityRules) {
  // SASS runs on its own major at an equal or higher minor, never across majors.
  EXPECT_TRUE(archs_run_on({"sm_80"}, 8, 0));
  EXPECT_TRUE(archs_run_on({"sm_80"}, 8, 9));
  EXPECT_FALSE(archs_run_on({"sm_86"}, 8, 0));
  EXPECT_FALSE(archs_run_on({"sm_80"}, 9, 0));
  EXPECT_FALSE(archs_run_on({"sm_75"}, 7, 0));  // a V100 on the CUDA 13 build
  EXPECT_TRUE(archs_run_on({"sm_100"}, 10, 3));
  EXPECT_FALSE(archs_run_on({"sm_100"}, 12, 0));
  EXPECT_TRUE(archs_run_on({"sm_120"}, 12, 1));
  // Arch-specific SASS only on its own capability; PTX on any newer one (compiled at load).
  EXPECT_TRUE(archs_run_on({"sm_90a"}, 9, 0));
  EXPECT_FALSE(archs_run_on({"sm_90a"}, 10, 0));
  EXPECT_TRUE(archs_run_on({"compute_80"}, 9, 0));
  EXPECT_FALSE(archs_run_on({"compute_80"}, 7, 5));
  // Unknown (a LibTorch whose list could not be read): not refused.
  EXPECT_TRUE(archs_run_on({}, 6, 1));
  EXPECT_TRUE(archs_run_on(kCu13Archs, 7, 5));
  EXPECT_TRUE(archs_run_on(kCu13Archs, 8, 9));
  EXPECT_TRUE(archs_run_on(kCu128Archs, 7, 0));
  EXPECT_FALSE(archs_run_on(kCu128Archs, 6, 1));
}

TEST(GpuBuild, RunsWhereTheDriverAndTheArchitectureFit) {
  EXPECT_EQ(gpu_build_refusal(kCu13, 13000, kH100, "n1"), "");
  EXPECT_EQ(gpu_build_refusal(kCu13, 13000, kT4, "n1"), "");
  EXPECT_EQ(gpu_build_refusal(kCu13, 13020, kL40, "n1"), "");
  EXPECT_EQ(gpu_build_refusal(kCu128, 12080, kV100, "n1"), "");
  EXPECT_EQ(gpu_build_refusal(kCu128, 13000, kV100, "n1"), "");  // a newer driver runs an older CUDA
  // CUDA 12's minor-version compatibility: a 12.2 driver (535) runs the 12.8 build.
  EXPECT_EQ(gpu_build_refusal(kCu128, 12020, kA100, "n1"), "");
}

TEST(GpuBuild, AVoltaOnTheCuda13BuildIsSentToCu128) {
  const std::string r = gpu_build_refusal(kCu13, 12040, kV100, "c214n3");
  ASSERT_FALSE(r.empty());
  EXPECT_TRUE(has(r, "c214n3")) << r;
  EXPECT_TRUE(has(r, "Tesla V100-SXM2-16GB (compute capability 7.0)")) << r;
  EXPECT_TRUE(has(r, "driver CUDA 12.4")) << r;
  EXPECT_TRUE(has(r, "CUDA 13.2 (track cu13), architectures sm_75 sm_80 sm_86 sm_90 sm_100 sm_120")) << r;
  EXPECT_TRUE(has(r, "no kernels for compute capability 7.0")) << r;
  EXPECT_TRUE(has(r, "older than the build's CUDA 13")) << r;
  EXPECT_TRUE(has(r, "MERIDIAN_TORCH_TRACK=cu128 jobs/setup-node.sh and a rebuild")) << r;
  // A V100 under driver 580: only the architecture is wrong, and cu128 is still the way.
  const std::string arch = gpu_build_refusal(kCu13, 13000, kV100, "c214n3");
  EXPECT_TRUE(has(arch, "no kernels for compute capability 7.0")) << arch;
  EXPECT_FALSE(has(arch, "older than")) << arch;
  EXPECT_TRUE(has(arch, "MERIDIAN_TORCH_TRACK=cu128")) << arch;
}

TEST(GpuBuild, AnOldDriverNamesBothWaysOut) {
  // An A100 with driver 535 (CUDA 12.2) on the CUDA 13 build: the cu128 track, or driver 580.
  const std::string r = gpu_build_refusal(kCu13, 12020, kA100, "gpu7");
  EXPECT_TRUE(has(r, "The driver supports CUDA 12.2, older than the build's CUDA 13")) << r;
  EXPECT_TRUE(has(r, "Fix: MERIDIAN_TORCH_TRACK=cu128 jobs/setup-node.sh and a rebuild")) << r;
  EXPECT_TRUE(has(r, "install NVIDIA driver 580 or newer (CUDA 13.0) for this build")) << r;
  EXPECT_FALSE(has(r, "no kernels")) << r;
}

TEST(GpuBuild, ADriverNoTrackRunsOnNamesTheDriverEachWayNeeds) {
  // Driver 470 (CUDA 11.4) under a V100: only cu128 covers the GPU, with driver 525+.
  const std::string on13 = gpu_build_refusal(kCu13, 11040, kV100, "esx-vm2");
  EXPECT_TRUE(has(on13, "driver CUDA 11.4")) << on13;
  EXPECT_TRUE(has(on13,
                  "install NVIDIA driver 525 or newer (CUDA 12.0, 570+ for all of it) with track cu128 "
                  "(MERIDIAN_TORCH_TRACK=cu128 jobs/setup-node.sh and a rebuild)"))
      << on13;
  EXPECT_FALSE(has(on13, "driver 580")) << on13;  // cu13 has no kernels for a V100
  const std::string on128 = gpu_build_refusal(kCu128, 11040, kV100, "esx-vm2");
  EXPECT_TRUE(has(on128, "Fix: install NVIDIA driver 525 or newer (CUDA 12.0, 570+ for all of it) for this build"))
      << on128;
  EXPECT_FALSE(has(on128, "MERIDIAN_TORCH_TRACK")) << on128;
  // An A100 under driver 470 on cu128: this build with a newer driver, or cu13 with 580.
  const std::string a100 = gpu_build_refusal(kCu128, 11040, kA100, "n3");
  EXPECT_TRUE(has(a100, "install NVIDIA driver 525 or newer")) << a100;
  EXPECT_TRUE(has(a100, "install NVIDIA driver 580 or newer (CUDA 13.0) with track cu13")) << a100;
  // No driver at all, the GPU known only by its device file.
  const std::string none = gpu_build_refusal(kCu128, 0, GpuInfo{}, "n2");
  EXPECT_TRUE(has(none, "No NVIDIA driver answers")) << none;
  EXPECT_TRUE(has(none, "a GPU of unknown model, driver CUDA none")) << none;
  EXPECT_TRUE(has(none, "install NVIDIA driver 525 or newer")) << none;
}

TEST(GpuBuild, AGpuNoTrackCoversSaysSo) {
  const std::string r = gpu_build_refusal(kCu128, 12080, kP100, "old");
  EXPECT_TRUE(has(r, "no kernels for compute capability 6.0")) << r;
  EXPECT_TRUE(has(r,
                  "no track of meridian carries kernels for compute capability 6.0 (the oldest covered is 7.0, "
                  "track cu128)"))
      << r;
}

TEST(GpuBuild, TheTestSeamParsesAndRefusesNonsense) {
  NodeGpus n;
  std::string error;
  ASSERT_TRUE(parse_test_node_gpu("driver_cuda=12.4;name=Tesla V100-SXM2-16GB;cc=7.0", n, error)) << error;
  EXPECT_TRUE(n.present);
  EXPECT_EQ(n.driver_cuda, 12040);
  ASSERT_EQ(n.gpus.size(), 1u);
  EXPECT_EQ(n.gpus[0].name, "Tesla V100-SXM2-16GB");
  EXPECT_EQ(n.gpus[0].major, 7);
  EXPECT_EQ(n.gpus[0].minor, 0);
  ASSERT_TRUE(parse_test_node_gpu("driver_cuda=13.0", n, error)) << error;
  EXPECT_EQ(n.gpus[0].major, 0);
  EXPECT_FALSE(parse_test_node_gpu("driver_cuda=twelve", n, error));
  EXPECT_TRUE(has(error, "'driver_cuda=twelve'")) << error;
  EXPECT_FALSE(parse_test_node_gpu("cc=7", n, error));
  EXPECT_FALSE(parse_test_node_gpu("gpu=V100", n, error));
}
