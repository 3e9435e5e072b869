// `meridian bench io FILE.h5`: the real loader's random batches against a sequential read of the
// same number of bytes of the same file, in the same run.
#include <chrono>
#include <cstdio>
#include <thread>

#include "commands.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/data/dataset_reader.h"
#include "meridian/data/loader.h"

namespace meridian::cli {

Command bench_io_command() {
  Command c;
  c.name = "bench io";
  c.summary = "Loader throughput (random batches) vs a sequential read of the same file";
  c.add_options = [](cxxopts::Options& o) {
    o.add_options()
        ("file", "Dataset file (.h5)", cxxopts::value<std::string>()->default_value(""))
        ("batch", "Samples per rank per batch", cxxopts::value<int64_t>()->default_value("32"))
        ("steps", "Batches per rank to time", cxxopts::value<int64_t>()->default_value("50"))
        ("compute-ms", "Fake compute per batch (sleep), to measure the data-wait fraction", cxxopts::value<double>()->default_value("0"))
        ("prefetch", "Batches read ahead", cxxopts::value<int>()->default_value("4"))
        ("io-driver", "HDF5 driver: mpio (MPI-IO, independent reads) or posix (direct chunk reads)", cxxopts::value<std::string>()->default_value("mpio"))
        ("augment", "Random resized crop + flip on the preparation thread")
        ("seed", "Sampler seed", cxxopts::value<uint64_t>()->default_value("0"));
    o.parse_positional({"file"});
    o.positional_help("FILE.h5");
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    using Clock = std::chrono::steady_clock;
    data::LoaderOptions lo;
    lo.path = p["file"].as<std::string>();
    if (lo.path.empty()) throw UserError("bench io: give the dataset file (meridian bench io FILE.h5)");
    lo.batch_size = p["batch"].as<int64_t>();
    lo.prefetch = p["prefetch"].as<int>();
    lo.driver = data::parse_io_driver(p["io-driver"].as<std::string>());
    lo.augment = p.count("augment") > 0;
    lo.seed = p["seed"].as<uint64_t>();
    const int64_t steps = p["steps"].as<int64_t>();
    const double compute_ms = p["compute-ms"].as<double>();
    if (steps < 1) throw UserError("--steps: must be at least 1");

    // Random batches through the loader.
    double random_s = 0, wait_s = 0;
    int64_t bytes_per_sample = 0;
    data::DatasetInfo info;  // as the loader validated it
    {
      data::Loader loader(rt, lo);
      info = loader.info();
      bytes_per_sample = info.height * info.width * info.channels + info.captions_per_sample * (info.context_length + 1) * 4 + 4;
      loader.next();  // first batch: thread start-up, not timed
      rt.barrier();
      const auto t0 = Clock::now();
      for (int64_t s = 0; s < steps; ++s) {
        wait_s += loader.next().wait_s;
        if (compute_ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(compute_ms));
      }
      random_s = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    // Sequential: the same number of samples per rank as contiguous rows (each rank its own range).
    double seq_s = 0;
    {
      data::DatasetReader reader(info, lo.driver);
      const int64_t n = reader.info().count;
      const int64_t per_rank = std::min<int64_t>(steps * lo.batch_size, n / rt.size());
      std::vector<uint8_t> images(reader.image_bytes() * lo.batch_size);
      std::vector<int32_t> tokens(lo.batch_size * info.captions_per_sample * info.context_length),
          lengths(lo.batch_size * info.captions_per_sample), labels(lo.batch_size);
      std::vector<int64_t> rows;
      rt.barrier();
      const auto t0 = Clock::now();
      int64_t done = 0;
      for (int64_t first = rt.rank() * per_rank; done < steps * lo.batch_size; ) {
        const int64_t count = std::min<int64_t>(lo.batch_size, per_rank - (first - rt.rank() * per_rank));
        rows.resize(count);
        for (int64_t i = 0; i < count; ++i) rows[i] = first + i;
        reader.read_rows(rows, images.data(), tokens.data(), lengths.data(), labels.data());
        done += count;
        first += count;
        if (first >= (rt.rank() + 1) * per_rank) first = rt.rank() * per_rank;  // wrap within the range
      }
      seq_s = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    const double samples = double(steps * lo.batch_size);
    const double random_rate = samples / random_s, seq_rate = samples / seq_s;
    char line[256];
    std::snprintf(line, sizeof(line), "%6d %-16s %12.1f %10.1f %14.1f %10.1f %8.2f %9.1f%%", rt.rank(), rt.host().c_str(),
                  random_rate, random_rate * bytes_per_sample / 1e6, seq_rate, seq_rate * bytes_per_sample / 1e6,
                  random_rate / seq_rate, 100 * wait_s / random_s);
    const auto lines = rt.gather_to_root(line);
    const double total_random = double(rt.sum(int64_t(random_rate * 1000))) / 1000;
    const double total_seq = double(rt.sum(int64_t(seq_rate * 1000))) / 1000;
    if (rt.rank() == 0) {
      std::printf("# meridian bench io %s: %d ranks, batch %lld per rank, %lld timed steps, driver %s%s, compute %.1f ms/step\n",
                  lo.path.c_str(), rt.size(), (long long)lo.batch_size, (long long)steps, p["io-driver"].as<std::string>().c_str(),
                  lo.augment ? ", augment" : "", compute_ms);
      std::printf("# random: the loader's batches (random rows, sorted, one H5Dread per run of consecutive rows);\n"
                  "# sequential: the same number of contiguous rows, same datasets, same buffers reused; MB/s: image + token bytes\n");
      std::printf("%6s %-16s %12s %10s %14s %10s %8s %10s\n", "rank", "host", "random/s", "MB/s", "sequential/s", "MB/s",
                  "ratio", "data wait");
      for (const auto& l : lines) std::printf("%s\n", l.c_str());
      std::printf("%6s %-16s %12.1f %10.1f %14.1f %10.1f %8.2f\n", "all", "", total_random,
                  total_random * bytes_per_sample / 1e6, total_seq, total_seq * bytes_per_sample / 1e6,
                  total_random / total_seq);
    }
    return 0;
  };
  return c;
}

}  // namespace meridian::cli
