// A device's dense matrix-multiply peak, the denominator of model FLOPs utilisation (MFU): the
// published dense peak of a known GPU, else the rate this rank measures for a square GEMM on its
// device and threads (what `meridian bench gemm` prints, and train uses unless train.peak_flops is
// set).
#pragma once

#include <ATen/ATen.h>

#include <string>

namespace meridian::comm {
class Runtime;
struct GpuInfo;
}  // namespace meridian::comm

namespace meridian::ops {

// Not collective: FLOP/s of an n x n x n matmul in `dtype` on `device`, at the calling thread's
// intra-op thread count: the best of `iters` timed calls after 3 warm-up calls (the best: the device,
// not a busy moment of the machine).
double gemm_rate(c10::Device device, at::ScalarType dtype, int64_t n, int iters);

// Not collective: n of the GEMM that measures `device`'s peak (device_peak, bench gemm): 8192 on a GPU;
// on a CPU at `threads` intra-op threads, 512 per thread of work (n^3 / threads = 512^3), a multiple of
// 128 from 512 to 2048.
int64_t peak_gemm_size(c10::Device device, int threads);

struct Peak {
  double flops = 0;    // per device, FLOP/s
  std::string source;  // "NVIDIA H100 80GB HBM3's published bf16 dense peak" / "measured: 512^3 bf16 GEMM, ..."
};

// Not collective: the published dense peak of `gpu_name` ("NVIDIA H100 80GB HBM3") in 16 bits (bf16 or
// fp16: the same tensor-core rate on the GPUs listed; fp16 only on V100 and T4) or float32 (without
// TF32, as LibTorch multiplies float32 by default); 0 for a name not in the table.
double published_peak(const std::string& gpu_name, bool half);

// Collective (a barrier, then every rank measures at once, as they train: ranks sharing a machine
// share its memory bandwidth): the best over ranks of each device's peak in `dtype` (kFloat,
// kBFloat16, kHalf): the
// table's for a known GPU, else measured by gemm_rate (n: peak_gemm_size). The
// best, not the mean: a rank measured while another process held its core would understate the device (MFU
// over 100 %); the source names a slowest rank below 90 % of the best. Every rank returns the same
// flops; the source is this rank's. Leaves the global random generator as it was.
Peak device_peak(const comm::Runtime& runtime, at::ScalarType dtype);

// Which path bf16 takes on CPU ranks, for the log of a bf16 run: `bf16_flops` (device_peak's bf16)
// against the float32 rate measured now, and the CPU's bf16 instructions (avx512_bf16, amx_bf16 in
// /proc/cpuinfo). `fast` false: bf16 GEMMs are not faster than float32 here (no bf16 units: LibTorch
// emulates them), so bf16 training is slower than float32. Collective (device_peak).
struct Bf16Path {
  bool fast = false;
  std::string text;
};
Bf16Path cpu_bf16_path(const comm::Runtime& runtime, double bf16_flops);

// Not collective: why `device` cannot compute in bf16 ("NVIDIA V100 ... has compute capability 7.0;
// bf16 needs 8.0 (Ampere) or newer"), or "" when it can: every CPU can (emulated where it has no bf16
// units: cpu_bf16_path says so), a GPU from compute capability 8.0.
std::string bf16_unsupported(c10::Device device);
// The same for a GPU's facts (pure): on compute capability 7.x the text names fp16 as the way.
std::string bf16_unsupported(const std::string& device, const comm::GpuInfo& gpu);

// train.precision auto for one device: "bf16" where it computes in bfloat16 natively (a GPU of compute
// capability 8.0 or newer, a CPU with avx512_bf16 or amx_bf16), "fp16" on a GPU of compute capability
// 7.x (float16 tensor cores, no bfloat16: V100, T4, RTX 20xx), "float32" elsewhere; `why` names the
// device and the fact. Pure: `gpu` null for a CPU (or a GPU not listed: float32... unless cc is known).
struct PrecisionChoice {
  std::string precision;  // "bf16", "fp16", "float32"
  std::string why;        // "NVIDIA A100-SXM4-80GB (cuda:0) has compute capability 8.0: bf16 tensor cores"
};
PrecisionChoice choose_precision(const std::string& device, const comm::GpuInfo* gpu, bool cpu_native_bf16);
// Not collective: this process's `device` (the CUDA inventory's GPU, or this CPU's flags).
PrecisionChoice choose_precision(c10::Device device);

}  // namespace meridian::ops
