#include "meridian/data/loader.h"

#include <atomic>
#include <memory>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <optional>

#include "jpeg.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/core/hash.h"
#include "pipeline.h"
#include "worker_pool.h"

namespace meridian::data {

namespace {

// What the I/O thread read for one batch.
struct RawBatch {
  std::vector<int64_t> rows;                   // ascending, unique
  std::vector<int64_t> repeat;                 // for each sampled position, index into rows (duplicates with padding)
  at::Tensor images, tokens, lengths, labels;  // as read: [R, H, W, 3], [R, K, L], [R, K], [R]
  EncodedRows encoded;                         // jpeg files: the images' bytes, decoded into `images` by finish
  std::shared_ptr<void> lease;                 // the read buffers' slot (Loader::Impl), given back when this goes
};

}  // namespace

namespace {

// augment_image's work: `src` (H x W x 3) into `out` (size x size x 3).
void augment_into(const cv::Mat& src, int size, uint64_t key, uint8_t* out) {
  const int64_t h = src.rows, w = src.cols;
  uint64_t s = splitmix64(key);
  int64_t ch = h, cw = w, top = 0, left = 0;
  for (int attempt = 0; attempt < 10; ++attempt) {  // as torchvision's RandomResizedCrop
    const double area = h * w * (0.5 + 0.5 * next_unit(s));
    const double ratio = std::exp(std::log(3.0 / 4) + (std::log(4.0 / 3) - std::log(3.0 / 4)) * next_unit(s));
    const int64_t tw = std::lround(std::sqrt(area * ratio)), th = std::lround(std::sqrt(area / ratio));
    if (tw > 0 && th > 0 && tw <= w && th <= h) {
      ch = th, cw = tw;
      top = int64_t(next_unit(s) * (h - th + 1)), left = int64_t(next_unit(s) * (w - tw + 1));
      break;
    }
  }
  const bool flip = next_unit(s) < 0.5;
  // OpenCV, not ATen: this runs on the loader's worker threads, where ATen's interpolation would
  // start an OpenMP team per thread. INTER_LINEAR is the same half-pixel bilinear (no antialiasing)
  // as interpolate(align_corners=false), rounded in fixed point.
  cv::Mat dst(size, size, CV_8UC3, out);
  const cv::Mat crop = src(cv::Rect(int(left), int(top), int(cw), int(ch)));
  if (!flip) {
    cv::resize(crop, dst, cv::Size(size, size), 0, 0, cv::INTER_LINEAR);
    return;
  }
  cv::Mat resized;
  cv::resize(crop, resized, cv::Size(size, size), 0, 0, cv::INTER_LINEAR);
  cv::flip(resized, dst, 1);
}

}  // namespace

at::Tensor augment_image(const at::Tensor& image, int size, uint64_t key) {
  const at::Tensor src = image.contiguous();
  at::Tensor out = at::empty({size, size, 3}, at::kByte);
  augment_into(cv::Mat(int(src.size(0)), int(src.size(1)), CV_8UC3, src.data_ptr<uint8_t>()), size, key,
               out.data_ptr<uint8_t>());
  return out;
}

struct Loader::Impl {
  LoaderOptions o;
  std::unique_ptr<DatasetReader> reader;
  std::unique_ptr<DistributedSampler> sampler;
  std::optional<Pipeline<Batch, RawBatch>> pipeline;  // reads with read(), finishes with finish()
  std::unique_ptr<WorkerPool> pool;                   // finish's helpers
  std::vector<std::unique_ptr<JpegCodec>> codecs;     // one per worker (jpeg files)

  Impl(const LoaderOptions& options) : o(options) {}

  // Reused read buffers (batch-sized), so steady state allocates nothing. A slot is free once the
  // RawBatch read into it is gone (its lease given back, after the finish step's last use of the
  // buffers) and no tensor but the slot's own views its storage (a batch handed out without a copy).
  // `slots` is the I/O thread's alone.
  struct Slot {
    at::Tensor images, tokens, lengths, labels;
    std::atomic<bool> leased{false};  // release-stored by the thread that drops the RawBatch
    bool free() const {
      if (leased.load(std::memory_order_acquire)) return false;
      for (const auto* t : {&images, &tokens, &lengths, &labels})
        if (t->storage().use_count() > 1) return false;
      // use_count() is a relaxed load. LibTorch drops a reference with an acq_rel decrement, so this
      // fence orders the reads of whoever held the storage before the writes of the next read.
      std::atomic_thread_fence(std::memory_order_acquire);
      return true;
    }
  };
  std::vector<std::shared_ptr<Slot>> slots;

  // A free slot, or a new one when the consumer still holds all of them (no waiting, no deadlock),
  // leased to `b`.
  const Slot& lease_slot(RawBatch& b) {
    std::shared_ptr<Slot> slot;
    for (const auto& s : slots)
      if (s->free()) {
        slot = s;
        break;
      }
    if (!slot) {
      const auto& info = reader->info();
      slot = std::make_shared<Slot>();
      const int64_t B = sampler->max_share();
      // Pinned on GPU ranks: handed out without a copy when no sample repeats (assemble).
      slot->images = at::empty({B, info.height, info.width, info.channels},
                               at::TensorOptions().dtype(at::kByte).pinned_memory(o.pinned));
      slot->tokens = at::empty({B, info.captions_per_sample, info.context_length}, at::kInt);
      slot->lengths = at::empty({B, info.captions_per_sample}, at::kInt);
      slot->labels = at::empty({B}, at::kInt);
      slots.push_back(slot);
    }
    slot->leased.store(true, std::memory_order_relaxed);
    // The lease keeps the slot alive past set_shares' clear (a redirect drops the batches read ahead).
    b.lease = std::shared_ptr<void>(nullptr, [slot](void*) { slot->leased.store(false, std::memory_order_release); });
    return *slot;
  }

  // The batch's rows (sorted; one HDF5 read per run of consecutive rows) into a free slot.
  RawBatch read(const BatchIndex& at) {
    RawBatch b;
    const auto rows = sampler->batch(at.epoch, at.position);
    b.rows = rows;
    std::sort(b.rows.begin(), b.rows.end());
    b.rows.erase(std::unique(b.rows.begin(), b.rows.end()), b.rows.end());
    auto sorted = rows;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t r : sorted) b.repeat.push_back(std::lower_bound(b.rows.begin(), b.rows.end(), r) - b.rows.begin());
    const int64_t R = int64_t(b.rows.size());
    const Slot& slot = lease_slot(b);
    b.images = slot.images.narrow(0, 0, R);
    b.tokens = slot.tokens.narrow(0, 0, R);
    b.lengths = slot.lengths.narrow(0, 0, R);
    b.labels = slot.labels.narrow(0, 0, R);
    const bool jpeg = reader->jpeg();
    if (jpeg) reader->read_encoded(b.rows, b.encoded);
    reader->read_rows(b.rows, jpeg ? nullptr : b.images.data_ptr<uint8_t>(), b.tokens.data_ptr<int32_t>(),
                      b.lengths.data_ptr<int32_t>(), b.labels.data_ptr<int32_t>());
    return b;
  }

  // One caption per sample (from seed, epoch, row) and the batch tensors, from what was read.
  Batch assemble(const RawBatch& rb, int64_t epoch) const {
    const auto& info = reader->info();
    const int64_t K = info.captions_per_sample, L = info.context_length;
    const int64_t B = int64_t(rb.repeat.size());
    Batch b;
    b.rows = at::empty({B}, at::kLong);
    b.labels = at::empty({B}, at::kInt);
    b.tokens = at::empty({B, L}, at::kInt);
    b.lengths = at::empty({B}, at::kInt);
    int64_t* rows_out = b.rows.data_ptr<int64_t>();
    int32_t* labels_out = b.labels.data_ptr<int32_t>();
    int32_t* tokens_out = b.tokens.data_ptr<int32_t>();
    int32_t* lengths_out = b.lengths.data_ptr<int32_t>();
    const int32_t* tokens_in = rb.tokens.data_ptr<int32_t>();
    const int32_t* lengths_in = rb.lengths.data_ptr<int32_t>();
    const int32_t* labels_in = rb.labels.data_ptr<int32_t>();
    for (int64_t i = 0; i < B; ++i) {  // plain loops: cheaper than tensor indexing at this size
      const int64_t r = rb.repeat[i];
      rows_out[i] = rb.rows[r];
      labels_out[i] = labels_in[r];
      const int64_t k = int64_t(
          splitmix64(o.seed ^ splitmix64(uint64_t(epoch) * 0x1000193ull + uint64_t(rows_out[i]))) % uint64_t(K));
      std::copy_n(tokens_in + (r * K + k) * L, L, tokens_out + i * L);
      lengths_out[i] = lengths_in[r * K + k];
    }
    // Without duplicate rows the batch hands out the read buffer itself (no copy); the slot is
    // reused once every tensor viewing it is gone.
    if (int64_t(rb.rows.size()) == B) {
      b.images = rb.images;
    } else {
      const auto& shape = rb.images.sizes();
      b.images = at::empty({B, shape[1], shape[2], shape[3]}, rb.images.options().pinned_memory(o.pinned));
      at::index_select_out(b.images, rb.images, 0, at::tensor(rb.repeat, at::kLong));
    }
    return b;
  }

  // Without augmentation the I/O thread also assembles each batch (a few small copies) and hands it
  // straight to the consumer: one thread hand-off per batch instead of two. With augmentation a
  // second thread assembles, crops and flips while the I/O thread reads ahead.
  // For a jpeg file the workers first decode every read image into its place in the batch buffer.
  Batch finish(const RawBatch& rb, int64_t epoch) {
    if (reader->jpeg()) {
      const auto& info = reader->info();
      const EncodedRows& enc = rb.encoded;
      uint8_t* images = rb.images.data_ptr<uint8_t>();
      pool->for_each(int64_t(rb.rows.size()), [&](int64_t i, int worker) {
        codecs[worker]->decode(enc.bytes.data() + enc.starts[i], size_t(enc.starts[i + 1] - enc.starts[i]),
                               int(info.height), int(info.width), images + i * reader->image_bytes(), info.path,
                               rb.rows[i]);
      });
    }
    Batch b = assemble(rb, epoch);
    if (!o.augment) return b;
    const int size = o.crop_size > 0 ? o.crop_size : int(reader->info().height);
    const int64_t B = b.rows.size(0);
    const int64_t* rows = b.rows.data_ptr<int64_t>();
    auto out = at::empty({B, size, size, 3}, at::TensorOptions().dtype(at::kByte).pinned_memory(o.pinned));
    const at::Tensor in = b.images.contiguous();
    const int H = int(in.size(1)), W = int(in.size(2));
    uint8_t* pixels = in.data_ptr<uint8_t>();
    pool->for_each(B, [&](int64_t i, int) {  // no ATen call on the workers: plain pointers
      augment_into(cv::Mat(H, W, CV_8UC3, pixels + i * H * W * 3), size,
                   splitmix64(o.seed ^ splitmix64(uint64_t(epoch) + 0x9e37ull)) ^ uint64_t(rows[i]),
                   out.data_ptr<uint8_t>() + i * size * size * 3);
    });
    b.images = out;
    return b;
  }
};

Loader::Loader(const comm::Runtime& rt, const LoaderOptions& options) : impl_(std::make_unique<Impl>(options)) {
  if (options.batch_size < 1) throw UserError("--batch: must be at least 1");
  if (options.prefetch < 1) throw UserError("--prefetch: must be at least 1");
  if (options.epoch < 0 || options.position < 0)
    throw UserError("loader: epoch and position must be >= 0 (got " + std::to_string(options.epoch) + ", " +
                    std::to_string(options.position) + ")");
  if (options.augment && (options.crop_size < 0 || options.crop_size > 8192))
    throw UserError("loader: crop size must be between 0 (stored size) and 8192");
  if (options.workers < 1 || options.workers > 256)
    throw UserError("data.workers: must be between 1 and 256, got " + std::to_string(options.workers));
  impl_->reader = open_on_every_rank(rt, options.path, options.driver, "image_text", "the image-text loader");
  const auto& info = impl_->reader->info();
  impl_->sampler = DistributedSampler::for_loader(options.path, info.count, "samples", options.batch_size, rt.rank(),
                                                  rt.size(), options.seed, options.drop_last);
  // OpenCV's own thread pool off: the crops run on data.workers threads, and OpenCV's idle workers
  // spin (measured: a rank on a shared core became a false compute straggler in the health tests).
  cv::setNumThreads(0);
  Impl* impl = impl_.get();
  const bool finish_thread = options.augment || impl->reader->jpeg();
  if (finish_thread) {
    impl->pool = std::make_unique<WorkerPool>(options.workers - 1);
    for (int w = 0; w < options.workers && impl->reader->jpeg(); ++w)
      impl->codecs.push_back(std::make_unique<JpegCodec>());
  }
  impl->pipeline.emplace(
      "loader", *impl->sampler, options.epoch, options.position, size_t(options.prefetch),
      [impl](const BatchIndex& at) { return impl->read(at); },
      [impl](RawBatch&& rb, const BatchIndex& at) { return impl->finish(rb, at.epoch); }, finish_thread);
}

Loader::~Loader() { impl_->pipeline.reset(); }  // the threads stop before what they read (and the pool) goes

Batch Loader::next() { return impl_->pipeline->next(); }

void Loader::set_shares(const std::vector<int64_t>& shares, int64_t epoch, int64_t position) {
  Impl* impl = impl_.get();
  impl->sampler->check_shares(shares);  // here, not on the I/O thread
  impl->pipeline->redirect(epoch, position, [impl, shares] {
    impl->sampler->set_shares(shares);
    impl->slots.clear();  // sized for the old shares (batches still held keep their own)
  });
}

const DatasetInfo& Loader::info() const { return impl_->reader->info(); }
const DistributedSampler& Loader::sampler() const { return *impl_->sampler; }

}  // namespace meridian::data
