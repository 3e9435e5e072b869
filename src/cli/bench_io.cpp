// `meridian bench io FILE.h5`: options and the report of data::run_io_bench.
#include <cstdio>

#include "commands.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/data/io_bench.h"

namespace meridian::cli {

Command bench_io_command() {
  Command c;
  c.name = "bench io";
  c.summary = "Loader throughput (random batches) vs a sequential read of the same file";
  c.add_options = [](cxxopts::Options& o) {
    // clang-format off
    o.add_options()
        ("file", "Dataset file (.h5)", cxxopts::value<std::string>()->default_value(""))
        ("batch", "Samples per rank per batch", cxxopts::value<int64_t>()->default_value("32"))
        ("steps", "Batches per rank to time", cxxopts::value<int64_t>()->default_value("50"))
        ("compute-ms", "Fake compute per batch (sleep), to measure the data-wait fraction", cxxopts::value<double>()->default_value("0"))
        ("prefetch", "Batches read ahead", cxxopts::value<int>()->default_value("4"))
        ("io-driver", "HDF5 driver: mpio (MPI-IO, independent reads) or posix (direct chunk reads)", cxxopts::value<std::string>()->default_value("mpio"))
        ("augment", "Random resized crop + flip on the preparation thread")
        ("workers", "Threads that decode (JPEG files) and augment each batch", cxxopts::value<int>()->default_value("1"))
        ("seed", "Sampler seed", cxxopts::value<uint64_t>()->default_value("0"));
    // clang-format on
    o.parse_positional({"file"});
    o.positional_help("FILE.h5");
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    data::LoaderOptions lo;
    lo.path = p["file"].as<std::string>();
    if (lo.path.empty()) throw UserError("bench io: give the dataset file (meridian bench io FILE.h5)");
    lo.batch_size = p["batch"].as<int64_t>();
    lo.prefetch = p["prefetch"].as<int>();
    lo.driver = data::parse_io_driver(p["io-driver"].as<std::string>());
    lo.augment = p.count("augment") > 0;
    lo.workers = p["workers"].as<int>();
    lo.seed = p["seed"].as<uint64_t>();
    const int64_t steps = p["steps"].as<int64_t>();
    const double compute_ms = p["compute-ms"].as<double>();

    const auto r = data::run_io_bench(rt, lo, steps, compute_ms);
    char line[256];
    std::snprintf(line, sizeof(line), "%6d %-16s %12.1f %10.1f %14.1f %10.1f %8.2f %9.1f%%", rt.rank(),
                  rt.host().c_str(), r.random_per_s, r.random_per_s * r.bytes_per_sample / 1e6, r.sequential_per_s,
                  r.sequential_per_s * r.bytes_per_sample / 1e6, r.random_per_s / r.sequential_per_s,
                  100 * r.wait_fraction);
    const auto lines = rt.gather_to_root(line);
    const double total_random = double(rt.sum(int64_t(r.random_per_s * 1000))) / 1000;
    const double total_seq = double(rt.sum(int64_t(r.sequential_per_s * 1000))) / 1000;
    if (rt.rank() == 0) {
      std::printf(
          "# meridian bench io %s: %d ranks, batch %lld per rank, %lld timed steps, driver %s%s, %d workers, "
          "compute %.1f ms/step\n",
          lo.path.c_str(), rt.size(), (long long)lo.batch_size, (long long)steps,
          p["io-driver"].as<std::string>().c_str(), lo.augment ? ", augment" : "", lo.workers, compute_ms);
      std::printf(
          "# random: the loader's batches (random rows, sorted, one H5Dread per run of consecutive rows);\n"
          "# sequential: the same number of contiguous rows, same datasets, same buffers reused (JPEG: decoded by as "
          "many threads); MB/s: stored image + token bytes\n");
      std::printf("%6s %-16s %12s %10s %14s %10s %8s %10s\n", "rank", "host", "random/s", "MB/s", "sequential/s",
                  "MB/s", "ratio", "data wait");
      for (const auto& l : lines) std::printf("%s\n", l.c_str());
      std::printf("%6s %-16s %12.1f %10.1f %14.1f %10.1f %8.2f\n", "all", "", total_random,
                  total_random * r.bytes_per_sample / 1e6, total_seq, total_seq * r.bytes_per_sample / 1e6,
                  total_random / total_seq);
    }
    return 0;
  };
  return c;
}

}  // namespace meridian::cli
