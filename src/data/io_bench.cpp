#include "meridian/data/io_bench.h"

#include <chrono>
#include <thread>
#include <vector>

#include "jpeg.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/data/dataset_reader.h"
#include "worker_pool.h"

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
    const int64_t image = info.image_encoding == "jpeg" ? info.encoded_bytes / std::max<int64_t>(1, info.count)
                                                        : info.height * info.width * info.channels;
    bytes_per_sample = image + info.captions_per_sample * (info.context_length + 1) * 4 + 4;
    loader.next();  // first batch: thread start-up, not timed
    rt.barrier();
    const auto t0 = Clock::now();
    for (int64_t s = 0; s < steps; ++s) {
      wait_s += loader.next().wait_s;
      if (compute_ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(compute_ms));
    }
    random_s = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  // Sequential: the same number of samples per rank as contiguous rows (each rank its own range);
  // JPEG images decoded by as many threads as the loader's.
  double seq_s = 0;
  {
    DatasetReader reader(info, o.driver);
    const bool jpeg = reader.jpeg();
    WorkerPool pool(jpeg ? o.workers - 1 : 0);
    std::vector<std::unique_ptr<JpegCodec>> codecs;
    for (int w = 0; jpeg && w < o.workers; ++w) codecs.push_back(std::make_unique<JpegCodec>());
    EncodedRows encoded;
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
      reader.read_rows(rows, jpeg ? nullptr : images.data(), tokens.data(), lengths.data(), labels.data());
      if (jpeg) {
        reader.read_encoded(rows, encoded);
        pool.for_each(count, [&](int64_t i, int worker) {
          codecs[worker]->decode(encoded.bytes.data() + encoded.starts[i],
                                 size_t(encoded.starts[i + 1] - encoded.starts[i]), int(info.height), int(info.width),
                                 images.data() + i * reader.image_bytes(), info.path, rows[i]);
        });
      }
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
