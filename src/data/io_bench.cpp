#include "meridian/data/io_bench.h"

#include <chrono>
#include <thread>
#include <vector>

#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/data/dataset_reader.h"

namespace meridian::data {

IoBenchResult run_io_bench(const comm::Runtime& rt, const LoaderOptions& o, int64_t steps, double compute_ms) {
  using Clock = std::chrono::steady_clock;
  if (steps < 1) throw UserError("--steps: must be at least 1");
  // Random batches through the loader.
  double random_s = 0, wait_s = 0;
  int64_t bytes_per_sample = 0;
  DatasetInfo info;  // as the loader validated it
  {
    Loader loader(rt, o);
    info = loader.info();
    bytes_per_sample =
        info.height * info.width * info.channels + info.captions_per_sample * (info.context_length + 1) * 4 + 4;
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
    DatasetReader reader(info, o.driver);
    const int64_t n = reader.info().count;
    const int64_t per_rank = std::min<int64_t>(steps * o.batch_size, n / rt.size());
    std::vector<uint8_t> images(reader.image_bytes() * o.batch_size);
    std::vector<int32_t> tokens(o.batch_size * info.captions_per_sample * info.context_length),
        lengths(o.batch_size * info.captions_per_sample), labels(o.batch_size);
    std::vector<int64_t> rows;
    rt.barrier();
    const auto t0 = Clock::now();
    int64_t done = 0;
    for (int64_t first = rt.rank() * per_rank; done < steps * o.batch_size;) {
      const int64_t count = std::min<int64_t>(o.batch_size, per_rank - (first - rt.rank() * per_rank));
      rows.resize(count);
      for (int64_t i = 0; i < count; ++i) rows[i] = first + i;
      reader.read_rows(rows, images.data(), tokens.data(), lengths.data(), labels.data());
      done += count;
      first += count;
      if (first >= (rt.rank() + 1) * per_rank) first = rt.rank() * per_rank;  // wrap within the range
    }
    seq_s = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  const double samples = double(steps * o.batch_size);
  return {samples / random_s, samples / seq_s, wait_s / random_s, bytes_per_sample};
}

}  // namespace meridian::data
