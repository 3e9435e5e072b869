// `meridian bench gemm`: every rank's achievable dense GEMM rate in float32 and bf16 at the thread
// count its runs use, measured at once on every rank (as they train), next to the published peak of a
// known GPU: the peak that train's MFU is reported against (ops::device_peak).
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <cstdio>

#include "commands.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/ops/peak.h"

namespace meridian::cli {

Command bench_gemm_command() {
  Command c;
  c.name = "bench gemm";
  c.summary = "Each rank's dense GEMM rate in float32 and bf16 (the peak that train's MFU is measured against)";
  c.add_options = [](cxxopts::Options& o) {
    // clang-format off
    o.add_options()
        ("size", "n of the n x n x n GEMM; 0: as train measures (8192 on a GPU; on a CPU 512 at one thread, more with more threads)", cxxopts::value<int64_t>()->default_value("0"))
        ("iters", "Timed calls per dtype (the best counts)", cxxopts::value<int>()->default_value("8"));
    // clang-format on
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    const c10::Device device = rt.device();
    int64_t n = p["size"].as<int64_t>();
    const int iters = p["iters"].as<int>();
    if (n < 0 || n > 65536) throw UserError("bench gemm: --size " + std::to_string(n) + " is not in 0..65536");
    if (iters < 1) throw UserError("bench gemm: --iters must be at least 1");
    if (n == 0) n = ops::peak_gemm_size(device, at::get_num_threads());
    rt.barrier();
    const double f32 = ops::gemm_rate(device, at::kFloat, n, iters);
    rt.barrier();
    const double bf16 = ops::gemm_rate(device, at::kBFloat16, n, iters);
    const int threads = device.is_cuda() ? 0 : at::get_num_threads();
    const auto rows = rt.gather_to_root(
        fmt::format("{:>4}  {:<16} {:<8} {:>7}  {:>14.1f}  {:>14.1f}  {:>6.2f}", rt.rank(), rt.host(), device.str(),
                    threads ? std::to_string(threads) : "-", f32 / 1e9, bf16 / 1e9, bf16 / f32));
    const ops::Peak f32_peak = ops::device_peak(rt, at::kFloat), bf16_peak = ops::device_peak(rt, at::kBFloat16);
    if (rt.rank() != 0) return 0;
    std::printf("bench gemm: %ld^3 matmul, best of %d calls per dtype, every rank at once\n", long(n), iters);
    std::printf("rank  host             device   threads  float32 GFLOP/s  bf16 GFLOP/s  bf16/f32\n");
    for (const auto& r : rows) std::printf("%s\n", r.c_str());
    std::printf("MFU peak per device: float32 %.1f GFLOP/s (%s); bf16 %.1f GFLOP/s (%s)\n", f32_peak.flops / 1e9,
                f32_peak.source.c_str(), bf16_peak.flops / 1e9, bf16_peak.source.c_str());
    return 0;
  };
  return c;
}

}  // namespace meridian::cli
