// `meridian bench ckpt`: options and the report of ckpt::run_ckpt_bench.
#include <cstdio>

#include "commands.h"
#include "meridian/ckpt/bench.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/units.h"

namespace meridian::cli {

Command bench_ckpt_command() {
  Command c;
  c.name = "bench ckpt";
  c.summary = "Checkpoint write/read GB/s (collective HDF5) vs a plain sequential write/read of the same bytes";
  c.add_options = [](cxxopts::Options& o) {
    // clang-format off
    o.add_options()
        ("size", "Checkpoint size (float32 tensors), e.g. 256M, 1G", cxxopts::value<std::string>()->default_value("256M"))
        ("tensors", "Number of tensors the size is split into", cxxopts::value<int>()->default_value("32"))
        ("dir", "Directory to write in (the checkpoint directory's file system)", cxxopts::value<std::string>()->default_value("/tmp/meridian-bench-ckpt"))
        ("repeat", "Measurements of each (the best is reported)", cxxopts::value<int>()->default_value("2"));
    // clang-format on
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    ckpt::CkptBenchOptions o;
    o.bytes = int64_t(parse_bytes(p["size"].as<std::string>(), "--size"));
    o.tensors = p["tensors"].as<int>();
    o.repeat = p["repeat"].as<int>();
    o.dir = p["dir"].as<std::string>();
    const auto r = ckpt::run_ckpt_bench(rt, o);
    if (rt.rank() == 0) {
      const double gb = r.bytes / 1e9;
      std::printf("bench ckpt: %d ranks, %.2f GB in %d tensors, %s\n", rt.size(), gb, o.tensors, o.dir.c_str());
      std::printf(
          "  collective write   %7.2f s  %6.2f GB/s  (+ checksums + fsync: the training stall per checkpoint)\n",
          r.write_s, gb / r.write_s);
      std::printf("    whole-file checksum %6.3f s  (%.1f %% of the write; slowest rank's share of the file)\n",
                  r.seal_s, 100 * r.seal_s / r.write_s);
      std::printf("  plain write        %7.2f s  %6.2f GB/s  (rank 0, one stream, + fsync)\n", r.plain_write_s,
                  gb / r.plain_write_s);
      std::printf("  ratio              %7.2f\n", r.plain_write_s / r.write_s);
      std::printf("  read + verify      %7.2f s  %6.2f GB/s per rank (every rank reads everything, as resume does)\n",
                  r.read_s, gb / r.read_s);
      std::printf("  plain read         %7.2f s  %6.2f GB/s\n", r.plain_read_s, gb / r.plain_read_s);
    }
    return 0;
  };
  return c;
}

}  // namespace meridian::cli
