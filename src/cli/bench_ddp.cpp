// `meridian bench ddp`: options and the report of parallel::run_ddp_bench.
#include <cstdio>

#include "commands.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/units.h"
#include "meridian/parallel/ddp_bench.h"

namespace meridian::cli {

Command bench_ddp_command() {
  Command c;
  c.name = "bench ddp";
  c.summary = "Data-parallel step time with overlapped vs. after-backward gradient reduction";
  c.add_options = [](cxxopts::Options& o) {
    // clang-format off
    o.add_options()
        ("params", "Model size in parameters (suffix K, M, G; a deep MLP of square layers)", cxxopts::value<std::string>()->default_value("16M"))
        ("depth", "Layers of the MLP", cxxopts::value<int>()->default_value("8"))
        ("batch", "Samples per rank per step", cxxopts::value<int64_t>()->default_value("32"))
        ("steps", "Timed steps", cxxopts::value<int>()->default_value("10"))
        ("warmup", "Untimed steps first", cxxopts::value<int>()->default_value("2"))
        ("bucket-mb", "Bucket size in MB", cxxopts::value<double>()->default_value("25"))
        ("bf16-comm", "Reduce gradients in bfloat16")
        ("trace", "Write a Chrome trace (all ranks, Perfetto / chrome://tracing) of the overlapped steps to this file", cxxopts::value<std::string>()->default_value(""));
    // clang-format on
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    parallel::DdpBenchOptions o;
    o.params = double(parse_bytes(p["params"].as<std::string>(), "--params"));
    o.depth = p["depth"].as<int>();
    o.batch = p["batch"].as<int64_t>();
    o.steps = p["steps"].as<int>();
    o.warmup = p["warmup"].as<int>();
    o.bucket_mb = p["bucket-mb"].as<double>();
    o.bf16_communication = p.count("bf16-comm") > 0;
    o.trace_path = p["trace"].as<std::string>();
    const auto r = parallel::run_ddp_bench(rt, o);
    if (rt.rank() == 0) {
      std::printf(
          "# %lld parameters (%d x Linear(%lld, %lld)), gradient %.1f MB, %lld buckets, %d ranks, batch %lld per rank, "
          "%s\n",
          (long long)r.parameters, o.depth, (long long)r.width, (long long)r.width, r.parameters * 4.0 / 1e6,
          (long long)r.buckets, rt.size(), (long long)o.batch,
          o.bf16_communication ? "bf16 communication" : "float32 communication");
      std::printf("%-34s %10s %12s %10s %12s\n", "", "step (ms)", "samples/s", "exposed", "efficiency");
      const auto line = [&](const char* name, double t, double exposed) {
        std::printf("%-34s %10.2f %12.1f %9.1f%% %11.1f%%\n", name, t * 1e3, o.batch * rt.size() / t, 100 * exposed / t,
                    100 * r.alone_s / t);
      };
      line("no communication (each rank alone)", r.alone_s, 0);
      line("ddp, reduction overlaps backward", r.overlapped_s, r.exposed_s);
      line("ddp, reduction after backward", r.after_s, r.reduction_s);
      std::printf(
          "# exposed: time finish() waited for communication (overlap) or the whole reduction (after backward)\n"
          "# efficiency: throughput / (ranks x throughput of the same ranks without communication)\n");
      const double bus = rt.size() > 1 ? 2.0 * (rt.size() - 1) / rt.size() : 0.0;
      if (bus > 0)
        std::printf("# gradient reduction after backward: %.1f MB in %.2f ms = %.2f GB/s busbw (algbw x 2(n-1)/n)\n",
                    r.gradient_bytes / 1e6, r.reduction_s * 1e3, r.gradient_bytes / r.reduction_s / 1e9 * bus);
      if (!o.trace_path.empty())
        std::printf("# trace: %s (open in https://ui.perfetto.dev or chrome://tracing)\n", o.trace_path.c_str());
    }
    return 0;
  };
  return c;
}

}  // namespace meridian::cli
