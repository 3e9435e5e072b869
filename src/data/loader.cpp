#include "meridian/data/loader.h"

#include <torch/nn/functional/upsampling.h>
#include <torch/nn/options/upsampling.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "channel.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/core/hash.h"

namespace meridian::data {

namespace {

struct RawBatch {
  int64_t epoch = 0, step = 0, next_position = 0;
  std::vector<int64_t> rows;  // ascending, unique
  std::vector<int64_t> repeat;  // for each sampled position, index into rows (duplicates with padding)
  at::Tensor images, tokens, lengths, labels;  // as read: [R, H, W, 3], [R, K, L], [R, K], [R]
  std::exception_ptr error;
};

}  // namespace

at::Tensor augment_image(const at::Tensor& image, int size, uint64_t key) {
  const int64_t h = image.size(0), w = image.size(1);
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
  auto crop = image.slice(0, top, top + ch).slice(1, left, left + cw).permute({2, 0, 1}).unsqueeze(0).to(at::kFloat);
  namespace F = torch::nn::functional;
  auto out = F::interpolate(crop, F::InterpolateFuncOptions()
                                      .size(std::vector<int64_t>{size, size})
                                      .mode(torch::kBilinear)
                                      .align_corners(false));
  if (flip) out = out.flip({3});
  return out.round_().clamp_(0, 255).to(at::kByte).squeeze(0).permute({1, 2, 0}).contiguous();
}

struct Loader::Impl {
  LoaderOptions o;
  std::unique_ptr<DatasetReader> reader;
  std::unique_ptr<DistributedSampler> sampler;
  Channel<RawBatch> raw;
  Channel<Batch> ready;
  std::thread io_thread, prep_thread;

  Impl(const LoaderOptions& options) : o(options), raw(options.prefetch), ready(options.prefetch) {}

  // Reused read buffers (batch-sized), so steady state allocates nothing: a slot is free when no
  // tensor but the slot's own views its storage. Touched by the I/O thread only.
  struct Slot {
    at::Tensor images, tokens, lengths, labels;
    bool free() const {
      for (const auto* t : {&images, &tokens, &lengths, &labels})
        if (t->storage().use_count() > 1) return false;
      return true;
    }
  };
  std::vector<std::unique_ptr<Slot>> slots;

  // A free slot, or a new one when the consumer still holds all of them (no waiting, no deadlock).
  const Slot& free_slot() {
    for (const auto& s : slots)
      if (s->free()) return *s;
    const auto& info = reader->info();
    auto s = std::make_unique<Slot>();
    const int64_t B = o.batch_size;
    s->images = at::empty({B, info.height, info.width, info.channels}, at::kByte);
    s->tokens = at::empty({B, info.captions_per_sample, info.context_length}, at::kInt);
    s->lengths = at::empty({B, info.captions_per_sample}, at::kInt);
    s->labels = at::empty({B}, at::kInt);
    slots.push_back(std::move(s));
    return *slots.back();
  }

  // Without augmentation the I/O thread also assembles each batch (a few small copies) and hands it
  // straight to the consumer: one thread hand-off per batch instead of two.
  void io_loop() {
    int64_t epoch = o.epoch, position = o.position;
    for (;;) {
      if (position >= sampler->epoch_samples()) ++epoch, position = 0;
      RawBatch b;
      b.epoch = epoch;
      b.step = position / sampler->global_batch();
      try {
        const auto rows = sampler->batch(epoch, position);
        b.rows = rows;
        std::sort(b.rows.begin(), b.rows.end());
        b.rows.erase(std::unique(b.rows.begin(), b.rows.end()), b.rows.end());
        auto sorted = rows;
        std::sort(sorted.begin(), sorted.end());
        for (int64_t r : sorted) b.repeat.push_back(std::lower_bound(b.rows.begin(), b.rows.end(), r) - b.rows.begin());
        const int64_t R = int64_t(b.rows.size());
        const Slot& slot = free_slot();
        b.images = slot.images.narrow(0, 0, R);
        b.tokens = slot.tokens.narrow(0, 0, R);
        b.lengths = slot.lengths.narrow(0, 0, R);
        b.labels = slot.labels.narrow(0, 0, R);
        reader->read_rows(b.rows, b.images.data_ptr<uint8_t>(), b.tokens.data_ptr<int32_t>(),
                          b.lengths.data_ptr<int32_t>(), b.labels.data_ptr<int32_t>());
      } catch (...) {
        if (o.augment) {
          b.error = std::current_exception();
          raw.push(std::move(b));
        } else {
          fail(std::current_exception());
        }
        return;
      }
      position += sampler->global_batch();
      b.next_position = position;
      if (o.augment) {
        if (!raw.push(std::move(b))) return;
        continue;
      }
      Batch batch;
      try {
        batch = assemble(b);
      } catch (...) {
        return fail(std::current_exception());
      }
      if (!ready.push(std::move(batch))) return;
    }
  }

  void fail(std::exception_ptr e) {
    error = e;  // published by close(): next() reads it after its pop fails
    ready.close();
  }

  // One caption per sample (from seed, epoch, row) and the batch tensors, from what was read.
  Batch assemble(const RawBatch& rb) {
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
      const int64_t k = int64_t(splitmix64(o.seed ^ splitmix64(uint64_t(rb.epoch) * 0x1000193ull + uint64_t(rows_out[i]))) % uint64_t(K));
      std::copy_n(tokens_in + (r * K + k) * L, L, tokens_out + i * L);
      lengths_out[i] = lengths_in[r * K + k];
    }
    // Without duplicate rows the batch hands out the read buffer itself (no copy); the slot is
    // reused once every tensor viewing it is gone.
    b.images = int64_t(rb.rows.size()) == B ? rb.images : rb.images.index_select(0, at::tensor(rb.repeat, at::kLong));
    b.epoch = rb.epoch;
    b.step = rb.step;
    b.next_position = rb.next_position;
    return b;
  }

  // With augmentation: a second thread crops and flips while the I/O thread reads ahead.
  void prep_loop() {
    const auto& info = reader->info();
    const int size = o.crop_size > 0 ? o.crop_size : int(info.height);
    RawBatch rb;
    while (raw.pop(rb)) {
      if (rb.error) return fail(rb.error);
      Batch b;
      try {
        b = assemble(rb);
        std::vector<at::Tensor> out;
        const int64_t* rows = b.rows.data_ptr<int64_t>();
        for (int64_t i = 0; i < b.rows.size(0); ++i)
          out.push_back(augment_image(b.images[i], size, splitmix64(o.seed ^ splitmix64(uint64_t(rb.epoch) + 0x9e37ull)) ^ uint64_t(rows[i])));
        b.images = at::stack(out);
      } catch (...) {
        return fail(std::current_exception());
      }
      if (!ready.push(std::move(b))) return;
    }
  }

  std::exception_ptr error;
};

Loader::Loader(const comm::Runtime& rt, const LoaderOptions& options) : impl_(std::make_unique<Impl>(options)) {
  if (options.batch_size < 1) throw UserError("--batch: must be at least 1");
  if (options.prefetch < 1) throw UserError("--prefetch: must be at least 1");
  if (options.epoch < 0 || options.position < 0)
    throw UserError("loader: epoch and position must be >= 0 (got " + std::to_string(options.epoch) + ", " +
                    std::to_string(options.position) + ")");
  if (options.augment && (options.crop_size < 0 || options.crop_size > 8192))
    throw UserError("loader: crop size must be between 0 (stored size) and 8192");
  impl_->reader = open_on_every_rank(rt, options.path, options.driver, "image_text", "the image-text loader");
  const auto& info = impl_->reader->info();
  impl_->sampler = DistributedSampler::for_loader(options.path, info.count, "samples", options.batch_size, rt.rank(),
                                                  rt.size(), options.seed, options.drop_last);
  impl_->io_thread = std::thread([this] { impl_->io_loop(); });
  if (options.augment) impl_->prep_thread = std::thread([this] { impl_->prep_loop(); });
}

Loader::~Loader() {
  impl_->raw.close();
  impl_->ready.close();
  impl_->io_thread.join();
  if (impl_->prep_thread.joinable()) impl_->prep_thread.join();
}

Batch Loader::next() { return next_batch(impl_->ready, impl_->error, "loader"); }

const DatasetInfo& Loader::info() const { return impl_->reader->info(); }
const DistributedSampler& Loader::sampler() const { return *impl_->sampler; }

}  // namespace meridian::data
