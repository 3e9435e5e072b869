#include "meridian/ops/peak.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>

#include "meridian/comm/probe.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/cpu_usage.h"
#include "meridian/ops/facts.h"

namespace meridian::ops {

namespace {

struct PublishedPeak {
  const char* name;  // a part of the CUDA device name; the first entry that matches counts
  double bf16, float32;
};

// Vendors' datasheets, dense (no sparsity), float32 without TF32. More specific names first: "A100"
// before "A10", "L40S" before "L4", H100's forms before the bare name.
constexpr PublishedPeak kPublished[] = {
    {"H200", 989.4e12, 66.9e12}, {"H100 NVL", 835e12, 60e12}, {"H100 PCIe", 756e12, 51.2e12},
    {"H100", 989.4e12, 66.9e12}, {"A100", 312e12, 19.5e12},   {"L40S", 362.05e12, 91.6e12},
    {"A10", 125e12, 31.2e12},    {"L4", 121e12, 30.3e12},     {"V100", 125e12, 15.7e12},
    {"T4", 65e12, 8.1e12},
};

// This rank's GPU in the CUDA inventory; nullptr on a CPU or where the inventory does not list it.
const comm::GpuInfo* rank_gpu(c10::Device device, const comm::GpuInventory& inventory) {
  const int index = device.has_index() ? device.index() : 0;
  return device.is_cuda() && index < int(inventory.gpus.size()) ? &inventory.gpus[size_t(index)] : nullptr;
}

}  // namespace

double gemm_rate(c10::Device device, at::ScalarType dtype, int64_t n, int iters) {
  // From a generator of its own: the global one is the run's, seeded for its initialisation.
  auto generator = at::detail::createCPUGenerator(1);
  const auto a = at::randn({n, n}, generator).to(device, dtype), b = at::randn({n, n}, generator).to(device, dtype);
  at::Tensor c;
  for (int i = 0; i < 3; ++i) c = at::mm(a, b);  // warm-up: the thread pool, the pages, the clocks
  c.sum().item<double>();                        // waits on CUDA
  double best = 1e30;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    c = at::mm(a, b);
    c.sum().item<double>();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * double(n) * double(n) * double(n) / best;
}

int64_t peak_gemm_size(c10::Device device, int threads) {
  if (device.is_cuda()) return 8192;
  // 512^3 per thread: at 1 and 2 threads 512^3 measured what 1024^3 did on this VM (float32 94-101
  // against 87-94 GFLOP/s on one thread, bf16 220-224 against 207-215) at an eighth of the work,
  // which every `train` start paid (0.5 s of a rank's CPU at one thread). More threads share a
  // larger product: the same work per thread, a multiple of 128, at most 2048^3.
  const double n = 512.0 * std::cbrt(double(std::max(1, threads)));
  return std::clamp<int64_t>(int64_t(std::lround(n / 128)) * 128, 512, 2048);
}

double published_peak(const std::string& gpu_name, bool half) {
  for (const auto& p : kPublished)
    if (gpu_name.find(p.name) != std::string::npos) return half ? p.bf16 : p.float32;
  return 0;
}

Peak device_peak(const comm::Runtime& rt, at::ScalarType type) {
  const c10::Device device = rt.device();
  const bool half = type != at::kFloat;
  const char* dtype = type == at::kBFloat16 ? "bf16" : type == at::kHalf ? "fp16" : "float32";
  Peak mine;
  if (device.is_cuda()) {
    const auto inventory = comm::local_gpus();
    if (const comm::GpuInfo* gpu = rank_gpu(device, inventory))
      mine = {published_peak(gpu->name, half), gpu->name + "'s published " + dtype + " dense peak"};
  }
  rt.barrier();
  core::CpuShare load;  // what else ran on this machine's cores while this rank measured
  if (mine.flops <= 0) {
    const int threads = device.is_cuda() ? 0 : at::get_num_threads();
    const int64_t n = peak_gemm_size(device, threads);
    core::CpuWindow window;
    window.open(rt.machine_pids());
    mine.flops = gemm_rate(device, type, n, device.is_cuda() ? 5 : 8);
    if (!device.is_cuda()) load = window.close();
    mine.source = fmt::format("measured: {}^3 {} GEMM on {}{}", n, dtype, device.str(),
                              threads ? fmt::format(", {} thread(s)", threads) : "");
  }
  // The best rank's, not the mean: a rank whose core another process held while it measured would
  // understate the device, and MFU would pass 100 %. A slowest rank well below the best is named.
  const int64_t best = rt.max(int64_t(mine.flops)), slowest = -rt.max(-int64_t(mine.flops));
  Peak peak;
  peak.flops = double(best);
  peak.source = mine.source;
  if (rt.size() > 1) peak.source += fmt::format(", the best of {} ranks", rt.size());
  if (slowest < 0.9 * double(best))
    peak.source += fmt::format(
        " (the slowest measured {:.0f} % of it: a core busy with another process at the time, "
        "or a slower device)",
        100.0 * double(slowest) / double(best));
  // A CPU measured while processes outside the job kept its cores busy (a one-rank run has no other
  // rank to take the best of): the peak may be low and MFU high, and the log says so, on every rank.
  const double others = double(rt.max(int64_t(load.others_cores * 100))) / 100;
  const double steal = double(rt.max(int64_t(load.steal_pct * 100))) / 100;
  if (others >= core::kSharedOthersCores || steal >= core::kSharedStealPct)
    peak.source += fmt::format(
        "; measured under load: other processes kept up to {:.1f} cores busy{}, so the peak may be below this "
        "machine's usual rate and MFU above its true value (`meridian bench gemm` on an idle machine gives the rate)",
        others, steal >= core::kSharedStealPct ? fmt::format(" and the hypervisor stole {:.0f} %", steal) : "");
  return peak;
}

Bf16Path cpu_bf16_path(const comm::Runtime& rt, double bf16_flops) {
  const double f32 = device_peak(rt, at::kFloat).flops;
  std::string flags;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; flags.empty() && std::getline(cpuinfo, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line);
    for (std::string w; words >> w;)
      if (w == "avx512_bf16" || w == "amx_bf16") flags += (flags.empty() ? "" : ", ") + w;
  }
  Bf16Path path;
  path.fast = bf16_flops > 1.2 * f32;
  const std::string rates = fmt::format("bf16 GEMMs at {:.1f} GFLOP/s per rank, {:.2f}x float32's {:.1f}",
                                        bf16_flops / 1e9, bf16_flops / f32, f32 / 1e9);
  const std::string units =
      flags.empty() ? "no bf16 instructions (avx512_bf16, amx_bf16) in /proc/cpuinfo" : "bf16 instructions: " + flags;
  path.text = path.fast ? "bf16 on CPU: " + rates + " (" + units + ")"
                        : "bf16 on CPU: " + rates + " (" + units +
                              "): LibTorch emulates bf16 here, so bf16 trains slower than float32; use "
                              "train.precision float32 on this machine";
  return path;
}

std::string bf16_unsupported(c10::Device device) {
  if (!device.is_cuda()) return "";
  const auto inventory = comm::local_gpus();
  const comm::GpuInfo* gpu = rank_gpu(device, inventory);
  if (!gpu) return "";  // not listed here: the first bf16 kernel will say
  return bf16_unsupported(device.str(), *gpu);
}

std::string bf16_unsupported(const std::string& device, const comm::GpuInfo& gpu) {
  if (gpu.major >= 8) return "";
  return fmt::format(
      "{} ({}) has compute capability {}.{}; bf16 needs 8.0 (Ampere) or newer{}", gpu.name, device, gpu.major,
      gpu.minor,
      gpu.major == 7 ? ": use fp16 (its tensor cores, with a dynamic loss scale; train.precision fp16 or auto)" : "");
}

PrecisionChoice choose_precision(const std::string& device, const comm::GpuInfo* gpu, bool cpu_native_bf16) {
  if (!gpu) {
    if (device.rfind("cuda", 0) == 0) return {"float32", device + ": compute capability not known"};
    if (cpu_native_bf16) return {"bf16", "this CPU has bf16 units: avx512_bf16 or amx_bf16"};
    return {"float32", "this CPU has no bf16 units: no avx512_bf16 or amx_bf16"};
  }
  const std::string what =
      fmt::format("{} ({}) has compute capability {}.{}", gpu->name, device, gpu->major, gpu->minor);
  if (gpu->major >= 8) return {"bf16", what + ": bf16 tensor cores"};
  if (gpu->major == 7) return {"fp16", what + ": fp16 tensor cores, no bf16 (a dynamic loss scale)"};
  return {"float32", what + ": no 16-bit tensor cores"};
}

PrecisionChoice choose_precision(c10::Device device) {
  if (!device.is_cuda()) return choose_precision(device.str(), nullptr, cpu_has_native_bf16());
  const auto inventory = comm::local_gpus();
  return choose_precision(device.str(), rank_gpu(device, inventory), false);
}

}  // namespace meridian::ops
