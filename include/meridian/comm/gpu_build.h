// Whether this build of meridian can run on a node's GPU: the NVIDIA driver must support the CUDA major
// version LibTorch was built with, and libtorch_cuda must carry kernels for the GPU's compute capability.
// Checked by every GPU rank at start, before any kernel (comm::Runtime), so a node that cannot run the
// build gets one clear refusal instead of "CUDA driver version is insufficient" or "no kernel image is
// available for execution on the device" in the middle of a step, or a silent fall back to the CPU.
// `meridian info` and `meridian doctor` show the same verdict for every node.
//
// The builds are the tracks of jobs/torch-tracks.tsv (cu13: CUDA 13, driver 580+, compute capability
// 7.5+; cu128: CUDA 12.8, driver 525+, 7.0+); jobs/setup-node.sh installs the one a node can run.
#pragma once

#include <string>
#include <vector>

#include "meridian/comm/probe.h"

namespace meridian::comm {

// A LibTorch track as jobs/torch-tracks.tsv lists it (CUDA versions coded as cudaDriverGetVersion's: 12080).
struct TorchTrack {
  std::string name;     // "cu128"
  std::string torch;    // "2.10.0"
  int cuda = 0;         // LibTorch's CUDA: 12080
  int driver_cuda = 0;  // the CUDA version the driver must support at least: 12000
  int driver = 0;       // the driver release that gives it: 525
  int full_driver = 0;  // the driver with the whole of `cuda` (no minor-version compatibility): 570
  int cc = 0;           // the oldest compute capability its kernels cover, major * 10 + minor: 70
};
// Every track, from the table this build was configured with. Not collective; any thread.
const std::vector<TorchTrack>& torch_tracks();

// What this binary runs on CUDA with.
struct CudaBuild {
  std::string track;               // "cu13", "cu128"; "" for a LibTorch outside the table (a GPU node's own)
  int cuda = 0;                    // LibTorch's CUDA: 13020
  std::vector<std::string> archs;  // libtorch_cuda's architectures: "sm_75", ..., "compute_90" (PTX); empty: unknown
};
// This binary's: the track and architectures from its configure, the CUDA version of the runtime it
// loaded (cudaRuntimeGetVersion). Not collective; any thread; creates no CUDA context.
CudaBuild this_cuda_build();

// A GPU of the node, whatever this build can use of it.
struct NodeGpus {
  bool present = false;         // the node has an NVIDIA GPU: NVML lists one, or a /dev/nvidia<N> device file exists
  std::string evidence;         // how that is known: "NVML lists 8", "/dev/nvidia0", "MERIDIAN_TEST_NODE_GPU"
  bool from_test_seam = false;  // described by MERIDIAN_TEST_NODE_GPU: no GPU of the CUDA runtime's is judged
  int driver_cuda = 0;          // the CUDA version the driver supports (cudaDriverGetVersion; 12040); 0: no driver
  std::vector<GpuInfo> gpus;    // NVML's list (also where the CUDA runtime cannot start); empty: not known
  std::string error;            // the test seam's value is malformed (then nothing else is set)
};
// Not collective; any thread; never throws; creates no CUDA context. NVML is loaded at run time
// (libnvidia-ml.so.1, part of the driver), so a node without a driver is simply "not present".
// A test seam: MERIDIAN_TEST_NODE_GPU="driver_cuda=12040;name=Tesla V100-SXM2-16GB;cc=7.0" stands for
// what the driver reports (every key optional), so the refusals are tested without a GPU.
NodeGpus node_gpus();
// The seam's parser: true and `out` filled when `spec` is well formed; false and `error` otherwise.
bool parse_test_node_gpu(const std::string& spec, NodeGpus& out, std::string& error);

// Whether `archs` (CudaBuild::archs) have kernels a GPU of compute capability major.minor runs: SASS
// of the same major and a minor no higher (sm_80 runs on 8.6), a family- or arch-specific one (sm_90a)
// only on its own, or PTX of an older or equal architecture (compute_80, compiled at load). Empty
// archs: true (unknown; not refused).
bool archs_run_on(const std::vector<std::string>& archs, int major, int minor);

// "" when `build` runs on `gpu` (its name and compute capability; major 0: unknown) under a driver
// supporting CUDA `driver_cuda`; else one line that names the host, the GPU and its compute
// capability, the driver's CUDA version, the build's CUDA version, track and architectures, and the
// fix: the track that runs there (MERIDIAN_TORCH_TRACK=... jobs/setup-node.sh and a rebuild) or the
// driver to install. The driver must support the build's CUDA major version (CUDA's minor-version
// compatibility covers the rest). Pure; not collective.
std::string gpu_build_refusal(const CudaBuild& build, int driver_cuda, const GpuInfo& gpu, const std::string& host);

// This build against this node's GPU, as the Runtime judges it at start-up: the verdict's text (what
// runs where, or gpu_build_refusal's line, or "no NVIDIA GPU on this node; build: ...") and whether it
// is a refusal. The GPU judged is the one the rank takes (cuda_index among those it sees; -1: none
// chosen) where the CUDA runtime lists it, else the driver's first (NVML) or the test seam's. Not
// collective.
struct GpuBuildVerdict {
  std::string text;
  bool refused = false;
};
GpuBuildVerdict gpu_build_verdict(int cuda_index, const std::string& host);

// "CUDA 13.2 (track cu13), architectures sm_75 ... sm_120". Pure.
std::string cuda_build_summary(const CudaBuild& build);

}  // namespace meridian::comm
