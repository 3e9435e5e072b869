#include "meridian/data/detection_loader.h"

#include <algorithm>
#include <map>
#include <opencv2/imgproc.hpp>
#include <optional>
#include <sstream>

#include "jpeg.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/core/hash.h"
#include "meridian/data/dataset_reader.h"
#include "pipeline.h"
#include "worker_pool.h"

namespace meridian::data {

uint64_t detection_augment_key(uint64_t seed, int64_t epoch, int64_t row) {
  return splitmix64(seed ^ splitmix64(uint64_t(epoch) * 0x100000001b3ull + 0xde7ull) ^ splitmix64(~uint64_t(row)));
}

std::array<int64_t, 3> mosaic_partners(uint64_t key, int64_t row, int64_t n) {
  uint64_t s = splitmix64(key ^ 0x706172746e657273ull);
  std::array<int64_t, 3> out;
  for (auto& r : out) {
    if (n < 2) {
      r = 0;
      continue;
    }
    r = std::min(n - 2, int64_t(next_unit(s) * double(n - 1)));
    if (r >= row) ++r;
  }
  return out;
}

namespace {

// What the I/O thread read for one batch: the batch's rows and the mosaic partners of its samples,
// each image as a view into `pixels`.
struct RawDetBatch {
  std::vector<int64_t> rows;                   // the batch, ascending (duplicates kept, drop_last = false)
  std::vector<uint64_t> keys;                  // per sample: augmentation key
  std::vector<std::vector<int64_t>> partners;  // per sample: 3 partner rows when it makes a mosaic, else empty
  std::map<int64_t, Labeled> items;            // every row read (batch and partners)
  at::Tensor pixels;                           // [R, H, W, 3] uint8: the storage `items` view
};

}  // namespace

struct DetectionLoader::Impl {
  DetectionLoaderOptions o;
  std::unique_ptr<DatasetReader> reader;  // I/O thread only (after construction)
  std::unique_ptr<DistributedSampler> sampler;
  int size = 0;  // output S
  // Reads with read_batch(); assemble() runs on the I/O thread without augmentation (a copy per
  // image, handed straight to the consumer), on a second thread with it (augmenting while the next
  // batch is read).
  std::optional<Pipeline<DetectionBatch, RawDetBatch>> pipeline;
  std::unique_ptr<WorkerPool> pool;                // jpeg files: read_batch decodes with these
  std::vector<std::unique_ptr<JpegCodec>> codecs;  // one per worker

  explicit Impl(const DetectionLoaderOptions& options) : o(options) {}

  DetectionAugment augment_of(int64_t epoch) const {
    DetectionAugment a = o.augment;
    if (o.close_mosaic_epoch >= 0 && epoch >= o.close_mosaic_epoch) a.mosaic_prob = 0;
    return a;
  }

  RawDetBatch read_batch(const BatchIndex& at) {
    RawDetBatch b;
    b.rows = sampler->batch(at.epoch, at.position);
    std::sort(b.rows.begin(), b.rows.end());
    const DetectionAugment a = augment_of(at.epoch);
    std::vector<int64_t> all = b.rows;
    for (int64_t r : b.rows) {
      const uint64_t key = detection_augment_key(o.seed, at.epoch, r);
      b.keys.push_back(key);
      b.partners.emplace_back();
      if (wants_mosaic(a, key)) {
        const auto p = mosaic_partners(key, r, reader->info().count);
        b.partners.back().assign(p.begin(), p.end());
        all.insert(all.end(), p.begin(), p.end());
      }
    }
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    const int64_t H = reader->info().height, W = reader->info().width;
    b.pixels = at::empty({int64_t(all.size()), H, W, 3}, at::kByte);
    if (reader->jpeg()) {
      EncodedRows enc;
      reader->read_encoded(all, enc);
      uint8_t* pixels = b.pixels.data_ptr<uint8_t>();
      pool->for_each(int64_t(all.size()), [&](int64_t i, int worker) {
        codecs[worker]->decode(enc.bytes.data() + enc.starts[i], size_t(enc.starts[i + 1] - enc.starts[i]), int(H),
                               int(W), pixels + i * H * W * 3, reader->info().path, all[i]);
      });
    } else {
      reader->read_rows(all, b.pixels.data_ptr<uint8_t>(), nullptr, nullptr, nullptr);
    }
    auto boxes = reader->read_boxes(all);
    for (size_t i = 0; i < all.size(); ++i) {
      Labeled& l = b.items[all[i]];
      l.image = cv::Mat(int(H), int(W), CV_8UC3, b.pixels.data_ptr<uint8_t>() + i * H * W * 3);
      l.boxes = std::move(boxes[i].boxes);
      l.classes = std::move(boxes[i].classes);
    }
    return b;
  }

  // A stored image at the output size (a copy only when the sizes differ).
  Labeled at_output_size(const Labeled& in) const {
    if (in.image.rows == size) return in;
    Labeled out{cv::Mat(), in.boxes, in.classes};
    cv::resize(in.image, out.image, cv::Size(size, size), 0, 0, cv::INTER_LINEAR);
    const float f = float(size) / float(in.image.rows);
    for (auto& b : out.boxes)
      for (auto& v : b) v *= f;
    return out;
  }

  // The batch tensors, augmenting each sample when enabled.
  DetectionBatch assemble(const RawDetBatch& rb, int64_t epoch) const {
    const int64_t B = int64_t(rb.rows.size());
    const DetectionAugment a = augment_of(epoch);
    DetectionBatch out;
    out.images = at::empty({B, 3, size, size}, at::TensorOptions().dtype(at::kByte).pinned_memory(o.pinned));
    out.rows = at::tensor(rb.rows, at::kLong);
    out.box_offsets = at::empty({B + 1}, at::kLong);
    int64_t* offsets = out.box_offsets.data_ptr<int64_t>();
    offsets[0] = 0;
    std::vector<float> boxes;
    std::vector<int64_t> classes;
    for (int64_t i = 0; i < B; ++i) {
      Labeled s = at_output_size(rb.items.at(rb.rows[i]));
      if (a.enabled) {
        std::vector<Labeled> partners;
        for (int64_t p : rb.partners[i]) partners.push_back(at_output_size(rb.items.at(p)));
        s = augment_detection(s, partners, a, size, rb.keys[i]);
      }
      if (!s.image.isContinuous()) s.image = s.image.clone();
      const auto hwc = at::from_blob(s.image.data, {size, size, 3}, at::kByte);
      out.images[i].copy_(hwc.permute({2, 0, 1}));
      for (size_t k = 0; k < s.boxes.size(); ++k) {
        boxes.insert(boxes.end(), s.boxes[k].begin(), s.boxes[k].end());
        classes.push_back(s.classes[k]);
      }
      offsets[i + 1] = int64_t(classes.size());
    }
    const int64_t M = int64_t(classes.size());
    const auto pinned = at::TensorOptions().pinned_memory(o.pinned);
    out.boxes = at::empty({M, 4}, pinned.dtype(at::kFloat)).copy_(at::from_blob(boxes.data(), {M, 4}, at::kFloat));
    out.classes = at::empty({M}, pinned.dtype(at::kLong)).copy_(at::from_blob(classes.data(), {M}, at::kLong));
    return out;
  }
};

namespace {
void check_options(const DetectionLoaderOptions& o) {
  if (o.batch_size < 1) throw UserError("--batch: must be at least 1");
  if (o.prefetch < 1) throw UserError("--prefetch: must be at least 1");
  if (o.epoch < 0 || o.position < 0)
    throw UserError("detection loader: epoch and position must be >= 0 (got " + std::to_string(o.epoch) + ", " +
                    std::to_string(o.position) + ")");
  if (o.workers < 1 || o.workers > 256)
    throw UserError("data.workers: must be between 1 and 256, got " + std::to_string(o.workers));
  if (o.image_size < 0 || o.image_size > 8192)
    throw UserError("detection loader: image size must be between 0 (stored size) and 8192, got " +
                    std::to_string(o.image_size));
  const auto& a = o.augment;
  const auto in = [](const char* name, double v, double lo, double hi) {
    if (!(v >= lo && v <= hi)) {
      std::ostringstream m;
      m << "detection loader: augment." << name << " must be in [" << lo << ", " << hi << "], got " << v;
      throw UserError(m.str());
    }
  };
  in("mosaic_prob", a.mosaic_prob, 0, 1);
  in("flip_prob", a.flip_prob, 0, 1);
  in("scale", a.scale, 0, 0.95);
  in("translate", a.translate, 0, 1);
  in("degrees", a.degrees, 0, 180);
  in("hsv_h", a.hsv_h, 0, 1);
  in("hsv_s", a.hsv_s, 0, 1);
  in("hsv_v", a.hsv_v, 0, 1);
}
}  // namespace

DetectionLoader::DetectionLoader(const comm::Runtime& rt, const DetectionLoaderOptions& options)
    : impl_(std::make_unique<Impl>(options)) {
  check_options(options);
  impl_->reader = open_on_every_rank(rt, options.path, IoDriver::POSIX, "detection", "the detection loader");
  const auto& info = impl_->reader->info();
  // The same file on every rank (checked above), so every rank throws this together.
  if (info.height != info.width || info.channels != 3)
    throw DataError(options.path,
                    info.image_encoding == "jpeg" ? "attributes 'image_height', 'image_width'" : "/images",
                    "expected square RGB images [N, S, S, 3] (letterboxed), got " + std::to_string(info.height) +
                        " x " + std::to_string(info.width) + " x " + std::to_string(info.channels));
  impl_->size = options.image_size > 0 ? options.image_size : int(info.height);
  impl_->sampler = DistributedSampler::for_loader(options.path, info.count, "images", options.batch_size, rt.rank(),
                                                  rt.size(), options.seed, options.drop_last);
  Impl* impl = impl_.get();
  if (impl->reader->jpeg()) {
    impl->pool = std::make_unique<WorkerPool>(options.workers - 1);
    for (int w = 0; w < options.workers; ++w) impl->codecs.push_back(std::make_unique<JpegCodec>());
  }
  impl->pipeline.emplace(
      "detection loader", *impl->sampler, options.epoch, options.position, size_t(options.prefetch),
      [impl](const BatchIndex& at) { return impl->read_batch(at); },
      [impl](RawDetBatch&& rb, const BatchIndex& at) { return impl->assemble(rb, at.epoch); }, options.augment.enabled);
}

DetectionLoader::~DetectionLoader() { impl_->pipeline.reset(); }  // the threads stop before what they read goes

DetectionBatch DetectionLoader::next() { return impl_->pipeline->next(); }

const DatasetInfo& DetectionLoader::info() const { return impl_->reader->info(); }
void DetectionLoader::set_shares(const std::vector<int64_t>& shares, int64_t epoch, int64_t position) {
  Impl* impl = impl_.get();
  impl->sampler->check_shares(shares);  // here, not on the I/O thread
  impl->pipeline->redirect(epoch, position, [impl, shares] { impl->sampler->set_shares(shares); });
}

const DistributedSampler& DetectionLoader::sampler() const { return *impl_->sampler; }
int DetectionLoader::image_size() const { return impl_->size; }

}  // namespace meridian::data
