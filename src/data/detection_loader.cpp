#include "meridian/data/detection_loader.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <map>
#include <opencv2/imgproc.hpp>
#include <sstream>
#include <thread>

#include "channel.h"
#include "h5.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/core/hash.h"

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

// Reads a detection file on one process. The DatasetReader reads image_text files only; this is
// its detection counterpart, private to the loader: /images by runs of consecutive rows, the boxes
// of a row through the offsets (held in memory: 8 bytes per image) from handles opened once, where
// read_boxes opens the file per call. Every HDF5 call holds the process-wide lock.
class DetectionReader {
 public:
  explicit DetectionReader(const std::string& path) {
    info_ = validate_dataset(path);
    if (info_.kind != "detection")
      throw DataError(path, "attribute 'kind'",
                      "the detection loader reads 'detection' files, not '" + info_.kind + "'");
    if (info_.height != info_.width || info_.channels != 3)
      throw DataError(path, "/images",
                      "expected square RGB images [N, S, S, 3] (letterboxed), got " + std::to_string(info_.height) +
                          " x " + std::to_string(info_.width) + " x " + std::to_string(info_.channels));
    const auto locked = h5::lock();
    file_ = h5::file_id(MERIDIAN_H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)));
    // No chunk cache for /images: each chunk (one image) is read about once per epoch.
    h5::Id uncached = h5::plist_id(MERIDIAN_H5_CHECK(H5Pcreate(H5P_DATASET_ACCESS)));
    MERIDIAN_H5_CHECK(H5Pset_chunk_cache(uncached, H5D_CHUNK_CACHE_NSLOTS_DEFAULT, 0, H5D_CHUNK_CACHE_W0_DEFAULT));
    images_ = h5::dataset_id(MERIDIAN_H5_CHECK(H5Dopen2(file_, "/images", uncached)));
    boxes_ = h5::dataset_id(MERIDIAN_H5_CHECK(H5Dopen2(file_, "/boxes", H5P_DEFAULT)));
    classes_ = h5::dataset_id(MERIDIAN_H5_CHECK(H5Dopen2(file_, "/box_classes", H5P_DEFAULT)));
    h5::Id offsets = h5::dataset_id(MERIDIAN_H5_CHECK(H5Dopen2(file_, "/box_offsets", H5P_DEFAULT)));
    offsets_.resize(size_t(info_.count + 1));
    MERIDIAN_H5_CHECK(H5Dread(offsets, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, offsets_.data()));
  }
  ~DetectionReader() {
    const auto locked = h5::lock();
    images_.reset(), boxes_.reset(), classes_.reset(), file_.reset();
  }
  DetectionReader(const DetectionReader&) = delete;
  DetectionReader& operator=(const DetectionReader&) = delete;

  const DatasetInfo& info() const { return info_; }

  // Rows ascending and unique; `out` holds rows.size() x H x W x 3 bytes.
  void read_images(const std::vector<int64_t>& rows, uint8_t* out) {
    const auto locked = h5::lock();
    const size_t row_bytes = size_t(info_.height) * info_.width * 3;
    h5::Id file_space = h5::space_id(MERIDIAN_H5_CHECK(H5Dget_space(images_)));
    hsize_t off[4] = {0, 0, 0, 0}, cnt[4] = {0, hsize_t(info_.height), hsize_t(info_.width), 3};
    for (size_t i = 0; i < rows.size();) {
      MERIDIAN_CHECK(rows[i] >= 0 && rows[i] < info_.count && (i == 0 || rows[i] > rows[i - 1]),
                     "rows must be in range, ascending and unique");
      size_t e = i + 1;
      while (e < rows.size() && rows[e] == rows[e - 1] + 1) ++e;
      off[0] = hsize_t(rows[i]), cnt[0] = hsize_t(e - i);
      MERIDIAN_H5_CHECK(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, off, nullptr, cnt, nullptr));
      h5::Id mem = h5::space_id(MERIDIAN_H5_CHECK(H5Screate_simple(4, cnt, nullptr)));
      MERIDIAN_H5_CHECK(H5Dread(images_, H5T_NATIVE_UINT8, mem, file_space, H5P_DEFAULT, out + i * row_bytes));
      i = e;
    }
  }

  // The boxes and classes of one row.
  void read_boxes(int64_t row, Labeled& out) {
    const int64_t first = offsets_[size_t(row)], n = offsets_[size_t(row) + 1] - first;
    out.boxes.assign(size_t(n), {});
    out.classes.assign(size_t(n), 0);
    if (n == 0) return;
    const auto locked = h5::lock();
    hsize_t off[2] = {hsize_t(first), 0}, cnt[2] = {hsize_t(n), 4};
    h5::Id space = h5::space_id(MERIDIAN_H5_CHECK(H5Dget_space(boxes_)));
    MERIDIAN_H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_SET, off, nullptr, cnt, nullptr));
    h5::Id mem = h5::space_id(MERIDIAN_H5_CHECK(H5Screate_simple(2, cnt, nullptr)));
    MERIDIAN_H5_CHECK(H5Dread(boxes_, H5T_NATIVE_FLOAT, mem, space, H5P_DEFAULT, out.boxes.data()));
    h5::Id cspace = h5::space_id(MERIDIAN_H5_CHECK(H5Dget_space(classes_)));
    MERIDIAN_H5_CHECK(H5Sselect_hyperslab(cspace, H5S_SELECT_SET, off, nullptr, cnt, nullptr));
    h5::Id cmem = h5::space_id(MERIDIAN_H5_CHECK(H5Screate_simple(1, cnt, nullptr)));
    MERIDIAN_H5_CHECK(H5Dread(classes_, H5T_NATIVE_INT32, cmem, cspace, H5P_DEFAULT, out.classes.data()));
  }

  // Equal on every rank that sees the same file: size, root attributes, first image.
  std::string fingerprint() {
    std::string text = std::to_string(info_.file_bytes) + "|" + info_.kind + "|" + info_.created_by + "|" +
                       std::to_string(info_.count) + "|" + std::to_string(info_.height) + "x" +
                       std::to_string(info_.width) + "|" + std::to_string(info_.box_count);
    std::vector<uint8_t> first(size_t(info_.height) * info_.width * 3);
    read_images({0}, first.data());
    const uint64_t h = fnv1a(first.data(), first.size(), fnv1a(text.data(), text.size()));
    char buf[17];
    std::snprintf(buf, sizeof(buf), "%016llx", (unsigned long long)h);
    return buf;
  }

 private:
  DatasetInfo info_;
  h5::Id file_, images_, boxes_, classes_;
  std::vector<int64_t> offsets_;  // [N + 1]
};

// What the I/O thread read for one batch: the batch's rows and the mosaic partners of its samples,
// each image as a view into `pixels`.
struct RawDetBatch {
  int64_t epoch = 0, step = 0, next_position = 0;
  std::vector<int64_t> rows;                   // the batch, ascending (duplicates kept, drop_last = false)
  std::vector<uint64_t> keys;                  // per sample: augmentation key
  std::vector<std::vector<int64_t>> partners;  // per sample: 3 partner rows when it makes a mosaic, else empty
  std::map<int64_t, Labeled> items;            // every row read (batch and partners)
  at::Tensor pixels;                           // [R, H, W, 3] uint8: the storage `items` view
  std::exception_ptr error;
};

}  // namespace

struct DetectionLoader::Impl {
  DetectionLoaderOptions o;
  std::unique_ptr<DetectionReader> reader;
  std::unique_ptr<DistributedSampler> sampler;
  int size = 0;  // output S
  Channel<RawDetBatch> raw;
  Channel<DetectionBatch> ready;
  std::thread io_thread, prep_thread;
  std::exception_ptr error;

  explicit Impl(const DetectionLoaderOptions& options) : o(options), raw(options.prefetch), ready(options.prefetch) {}

  DetectionAugment augment_of(int64_t epoch) const {
    DetectionAugment a = o.augment;
    if (o.close_mosaic_epoch >= 0 && epoch >= o.close_mosaic_epoch) a.mosaic_prob = 0;
    return a;
  }

  RawDetBatch read_batch(int64_t epoch, int64_t position) {
    RawDetBatch b;
    b.epoch = epoch;
    b.step = position / sampler->global_batch();
    b.rows = sampler->batch(epoch, position);
    std::sort(b.rows.begin(), b.rows.end());
    const DetectionAugment a = augment_of(epoch);
    std::vector<int64_t> all = b.rows;
    for (int64_t r : b.rows) {
      const uint64_t key = detection_augment_key(o.seed, epoch, r);
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
    reader->read_images(all, b.pixels.data_ptr<uint8_t>());
    for (size_t i = 0; i < all.size(); ++i) {
      Labeled& l = b.items[all[i]];
      l.image = cv::Mat(int(H), int(W), CV_8UC3, b.pixels.data_ptr<uint8_t>() + i * H * W * 3);
      reader->read_boxes(all[i], l);
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
  DetectionBatch assemble(const RawDetBatch& rb) const {
    const int64_t B = int64_t(rb.rows.size());
    const DetectionAugment a = augment_of(rb.epoch);
    DetectionBatch out;
    out.images = at::empty({B, 3, size, size}, at::kByte);
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
    out.boxes = at::from_blob(boxes.data(), {M, 4}, at::kFloat).clone();
    out.classes = at::from_blob(classes.data(), {M}, at::kLong).clone();
    out.epoch = rb.epoch;
    out.step = rb.step;
    out.next_position = rb.next_position;
    return out;
  }

  void fail(std::exception_ptr e) {
    error = e;  // published by close(): next() reads it after its pop fails
    ready.close();
  }

  // Without augmentation the I/O thread also assembles (a copy per image) and hands each batch
  // straight to the consumer; with it, a second thread augments while this one reads ahead.
  void io_loop() {
    int64_t epoch = o.epoch, position = o.position;
    for (;;) {
      if (position >= sampler->epoch_samples()) ++epoch, position = 0;
      RawDetBatch b;
      try {
        b = read_batch(epoch, position);
      } catch (...) {
        if (!o.augment.enabled) return fail(std::current_exception());
        b.error = std::current_exception();
        raw.push(std::move(b));
        return;
      }
      position += sampler->global_batch();
      b.next_position = position;
      if (o.augment.enabled) {
        if (!raw.push(std::move(b))) return;
        continue;
      }
      DetectionBatch batch;
      try {
        batch = assemble(b);
      } catch (...) {
        return fail(std::current_exception());
      }
      if (!ready.push(std::move(batch))) return;
    }
  }

  void prep_loop() {
    RawDetBatch rb;
    while (raw.pop(rb)) {
      if (rb.error) return fail(rb.error);
      DetectionBatch b;
      try {
        b = assemble(rb);
      } catch (...) {
        return fail(std::current_exception());
      }
      if (!ready.push(std::move(b))) return;
    }
  }
};

namespace {
void check_options(const DetectionLoaderOptions& o) {
  if (o.batch_size < 1) throw UserError("--batch: must be at least 1");
  if (o.prefetch < 1) throw UserError("--prefetch: must be at least 1");
  if (o.epoch < 0 || o.position < 0)
    throw UserError("detection loader: epoch and position must be >= 0 (got " + std::to_string(o.epoch) + ", " +
                    std::to_string(o.position) + ")");
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
  // Open on every rank; agree on success before comparing, so one rank's error is everyone's.
  std::string error, fingerprint;
  try {
    impl_->reader = std::make_unique<DetectionReader>(options.path);
    fingerprint = impl_->reader->fingerprint();
  } catch (const UserError& e) {
    error = e.what();
  }
  const auto errors = rt.allgather(error);
  for (int r = 0; r < rt.size(); ++r)
    if (!errors[r].empty())
      throw UserError(r == rt.rank() ? errors[r] : "rank " + std::to_string(r) + ": " + errors[r]);
  const auto prints = rt.allgather(fingerprint + " " + rt.host());
  for (int r = 1; r < rt.size(); ++r) {
    if (prints[r].substr(0, 16) != prints[0].substr(0, 16))
      throw UserError(options.path + ": rank " + std::to_string(r) + " on " + prints[r].substr(17) +
                      " sees a different dataset than rank 0 on " + prints[0].substr(17) +
                      " (size, attributes or content differ): is the data path the same file on every node?");
  }
  const auto& info = impl_->reader->info();
  impl_->size = options.image_size > 0 ? options.image_size : int(info.height);
  impl_->sampler = std::make_unique<DistributedSampler>(info.count, options.batch_size, rt.rank(), rt.size(),
                                                        options.seed, options.drop_last);
  if (impl_->sampler->steps_per_epoch() == 0)
    throw UserError(options.path + ": " + std::to_string(info.count) + " samples are fewer than one global batch (" +
                    std::to_string(impl_->sampler->global_batch()) + "); lower --batch or pass drop_last = false");
  impl_->io_thread = std::thread([this] { impl_->io_loop(); });
  if (options.augment.enabled) impl_->prep_thread = std::thread([this] { impl_->prep_loop(); });
}

DetectionLoader::~DetectionLoader() {
  impl_->raw.close();
  impl_->ready.close();
  if (impl_->io_thread.joinable()) impl_->io_thread.join();
  if (impl_->prep_thread.joinable()) impl_->prep_thread.join();
}

DetectionBatch DetectionLoader::next() {
  const auto t0 = std::chrono::steady_clock::now();
  DetectionBatch b;
  if (!impl_->ready.pop(b)) {
    // Closed: `error` was set before close() (the channel's mutex orders the two).
    if (impl_->error) std::rethrow_exception(impl_->error);
    MERIDIAN_CHECK(false, "detection loader stopped");
  }
  b.wait_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return b;
}

const DatasetInfo& DetectionLoader::info() const { return impl_->reader->info(); }
const DistributedSampler& DetectionLoader::sampler() const { return *impl_->sampler; }
int DetectionLoader::image_size() const { return impl_->size; }

}  // namespace meridian::data
