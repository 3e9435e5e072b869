// The detection loader on 1, 2 and 4 ranks, against the file read another way (images straight
// through HDF5, boxes through test::row_boxes) and against augment_detection computed here from
// (seed, epoch, row) alone, which shows that a batch does not depend on the number of ranks. Also
// the DatasetReader the loader reads through, on a detection file: images and the boxes of sorted
// row sets (runs and gaps) against plain HDF5 and test::row_boxes (which opens the file per row).
#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "data_test.h"
#include "meridian/core/error.h"
#include "meridian/data/box_augment.h"
#include "meridian/data/dataset_reader.h"
#include "meridian/data/detection_loader.h"
#include "meridian/data/format.h"
#include "meridian/data/prep.h"
#include "meridian/data/synthetic_prep.h"
#include "meridian/data/tokenizer.h"
#include "mpi_test_main.h"

namespace fs = std::filesystem;
using meridian::test::message_of;
using meridian::test::runtime;
namespace data = meridian::data;

namespace {

constexpr int kSize = 48;
constexpr int64_t kDetCount = 29;

// Its own subdirectory of the data tests' shared one (file names must not clash with theirs).
const std::string& det_dir() {
  static const std::string dir = [] {
    const std::string d = meridian::test::shared_dir() + "/detection_loader";
    if (runtime().rank() == 0) fs::create_directories(d);
    runtime().barrier();
    return d;
  }();
  return dir;
}

// Row `row` of /images, read with plain HDF5 (not through the loader's reader).
cv::Mat read_stored_image(const std::string& path, int64_t row) {
  cv::Mat image(kSize, kSize, CV_8UC3);
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t dset = H5Dopen2(file, "/images", H5P_DEFAULT);
  const hid_t space = H5Dget_space(dset);
  const hsize_t off[4] = {hsize_t(row), 0, 0, 0}, cnt[4] = {1, kSize, kSize, 3};
  H5Sselect_hyperslab(space, H5S_SELECT_SET, off, nullptr, cnt, nullptr);
  const hid_t mem = H5Screate_simple(4, cnt, nullptr);
  EXPECT_GE(H5Dread(dset, H5T_NATIVE_UINT8, mem, space, H5P_DEFAULT, image.data), 0);
  H5Sclose(mem);
  H5Sclose(space);
  H5Dclose(dset);
  H5Fclose(file);
  return image;
}

// The fixture and all its images, read once before any loader exists: HDF5 is not thread-safe in
// this build and the test cannot take the library's HDF5 lock, so it must not call HDF5 directly
// while a loader's I/O thread does.
struct Fixture {
  std::string path;
  std::vector<cv::Mat> images;
};
const Fixture& fixture() {
  static const Fixture f = [] {
    data::PrepSyntheticOptions o;
    o.out = det_dir() + "/det.h5";
    o.count = kDetCount;
    o.seed = 4;
    o.size = kSize;
    o.block = 3;
    EXPECT_EQ(data::prep_synthetic_detection(runtime(), o).written, kDetCount);
    Fixture f{o.out, {}};
    for (int64_t row = 0; row < kDetCount; ++row) f.images.push_back(read_stored_image(o.out, row));
    return f;
  }();
  return f;
}
const std::string& det_file() { return fixture().path; }
const cv::Mat& stored_image(int64_t row) { return fixture().images.at(size_t(row)); }

data::Labeled stored(const data::DatasetInfo& info, int64_t row) {
  const auto b = meridian::test::row_boxes(info, row);
  return {stored_image(row), b.boxes, b.classes};
}

// Image i of a batch as HWC bytes.
cv::Mat batch_image(const data::DetectionBatch& b, int64_t i) {
  const auto hwc = b.images[i].permute({1, 2, 0}).contiguous();
  return cv::Mat(int(hwc.size(0)), int(hwc.size(1)), CV_8UC3, hwc.data_ptr<uint8_t>()).clone();
}

bool same_pixels(const cv::Mat& a, const cv::Mat& b) {
  return a.size() == b.size() && a.type() == b.type() && cv::countNonZero(cv::Mat(a != b).reshape(1)) == 0;
}

// The boxes of image i of a batch, checking the offsets on the way.
data::RowBoxes boxes_of(const data::DetectionBatch& b, int64_t i) {
  data::RowBoxes r;
  const int64_t first = b.box_offsets[i].item<int64_t>(), last = b.box_offsets[i + 1].item<int64_t>();
  EXPECT_LE(first, last);
  for (int64_t k = first; k < last; ++k) {
    r.boxes.push_back({b.boxes[k][0].item<float>(), b.boxes[k][1].item<float>(), b.boxes[k][2].item<float>(),
                       b.boxes[k][3].item<float>()});
    r.classes.push_back(int32_t(b.classes[k].item<int64_t>()));
  }
  return r;
}

void expect_consistent_shapes(const data::DetectionBatch& b, int64_t B, int S) {
  ASSERT_EQ(b.images.sizes(), (at::IntArrayRef{B, 3, S, S}));
  ASSERT_EQ(b.images.scalar_type(), at::kByte);
  ASSERT_EQ(b.rows.sizes(), (at::IntArrayRef{B}));
  ASSERT_EQ(b.box_offsets.sizes(), (at::IntArrayRef{B + 1}));
  const int64_t M = b.boxes.size(0);
  ASSERT_EQ(b.boxes.sizes(), (at::IntArrayRef{M, 4}));
  ASSERT_EQ(b.boxes.scalar_type(), at::kFloat);
  ASSERT_EQ(b.classes.sizes(), (at::IntArrayRef{M}));
  ASSERT_EQ(b.classes.scalar_type(), at::kLong);
  EXPECT_EQ(b.box_offsets[0].item<int64_t>(), 0);
  EXPECT_EQ(b.box_offsets[B].item<int64_t>(), M);
}

data::DetectionLoaderOptions augmented(uint64_t seed) {
  data::DetectionLoaderOptions o;
  o.path = det_file();
  o.batch_size = 2;
  o.seed = seed;
  o.prefetch = 2;
  o.augment.enabled = true;
  o.augment.mosaic_prob = 0.7;
  o.augment.degrees = 5;
  return o;
}

}  // namespace

TEST(DetectionLoader, DatasetReaderReadsImagesAndBoxesOfSortedRows) {
  const auto info = data::validate_dataset(det_file());
  data::DatasetReader reader(det_file(), data::IoDriver::POSIX);
  EXPECT_EQ(reader.info().kind, "detection");
  // Runs of consecutive rows and gaps, the first and the last row; a different set per rank.
  std::vector<int64_t> rows{0, 1, 2, 5, 7, 8, 13, 20, 21, 22, 23, kDetCount - 1};
  for (auto& r : rows) r = (r + runtime().rank()) % kDetCount;
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  const auto got = reader.read_boxes(rows);
  ASSERT_EQ(got.size(), rows.size());
  size_t boxes = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto want = meridian::test::row_boxes(info, rows[i]);
    EXPECT_EQ(got[i].boxes, want.boxes) << "row " << rows[i];
    EXPECT_EQ(got[i].classes, want.classes) << "row " << rows[i];
    boxes += want.boxes.size();
  }
  EXPECT_GT(boxes, 0u);  // the comparison is not between empty lists only
  std::vector<uint8_t> pixels(rows.size() * kSize * kSize * 3);
  reader.read_rows(rows, pixels.data(), nullptr, nullptr, nullptr);
  for (size_t i = 0; i < rows.size(); ++i)
    EXPECT_TRUE(
        same_pixels(cv::Mat(kSize, kSize, CV_8UC3, pixels.data() + i * kSize * kSize * 3), stored_image(rows[i])))
        << "row " << rows[i];
  // Every row at once (one run): all the file's boxes, each row's as read one by one.
  std::vector<int64_t> all(kDetCount);
  std::iota(all.begin(), all.end(), 0);
  const auto every = reader.read_boxes(all);
  size_t total = 0;
  for (int64_t r = 0; r < kDetCount; ++r) {
    total += every[size_t(r)].boxes.size();
    EXPECT_EQ(every[size_t(r)].classes, meridian::test::row_boxes(info, r).classes) << "row " << r;
  }
  EXPECT_EQ(int64_t(total), info.box_count);
  EXPECT_TRUE(reader.read_boxes({}).empty());
  // Unsorted or out-of-range rows, and datasets a detection file does not have.
  EXPECT_ANY_THROW(reader.read_boxes({3, 2}));
  EXPECT_ANY_THROW(reader.read_boxes({kDetCount}));
  int32_t label = 0;
  EXPECT_THROW(reader.read_rows({0}, nullptr, nullptr, nullptr, &label), std::invalid_argument);
  EXPECT_THROW(reader.tokenizer(), meridian::DataError);
}

TEST(DetectionLoader, WithoutAugmentationBatchesAreTheStoredRowsAndTheirBoxes) {
  data::DetectionLoaderOptions o;
  o.path = det_file();
  o.batch_size = 3;
  o.seed = 5;
  o.prefetch = 2;
  data::DetectionLoader loader(runtime(), o);
  const auto& s = loader.sampler();
  const auto& info = loader.info();
  EXPECT_EQ(loader.image_size(), kSize);
  std::string mine;
  int64_t boxes = 0;
  for (int64_t step = 0; step < s.steps_per_epoch(); ++step) {
    const auto b = loader.next();
    EXPECT_EQ(b.epoch, 0);
    EXPECT_EQ(b.step, step);
    EXPECT_EQ(b.next_position, (step + 1) * s.global_batch());
    expect_consistent_shapes(b, 3, kSize);
    for (int64_t i = 0; i < 3; ++i) {
      const int64_t row = b.rows[i].item<int64_t>();
      if (i > 0) EXPECT_LT(b.rows[i - 1].item<int64_t>(), row) << "ascending row order";
      const auto want = meridian::test::row_boxes(info, row);
      const auto got = boxes_of(b, i);
      EXPECT_EQ(got.boxes, want.boxes) << "row " << row;
      EXPECT_EQ(got.classes, want.classes) << "row " << row;
      EXPECT_TRUE(same_pixels(batch_image(b, i), stored_image(row))) << "row " << row;
      boxes += int64_t(want.boxes.size());
      mine += std::to_string(row) + ",";
    }
  }
  EXPECT_GT(boxes, 0) << "the fixture has boxes";
  // Every rank's rows together: exactly the sampler's epoch, none twice.
  std::multiset<int64_t> all, want;
  for (const auto& text : runtime().allgather(mine)) {
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) all.insert(std::stoll(item));
  }
  for (int64_t p = 0; p < s.epoch_samples(); ++p) want.insert(s.row(0, p));
  EXPECT_EQ(all, want);
  EXPECT_EQ(std::set<int64_t>(all.begin(), all.end()).size(), all.size()) << "a row was read by two ranks";
  EXPECT_EQ(loader.next().epoch, 1) << "the next batch starts epoch 1";
}

TEST(DetectionLoader, AugmentedBatchesAreAFunctionOfSeedEpochAndRow) {
  const auto o = augmented(9);
  data::DetectionLoader a(runtime(), o), b(runtime(), o), other(runtime(), augmented(10));
  const auto& info = a.info();
  bool differs = false;
  int64_t boxes = 0, mosaics = 0;
  for (int step = 0; step < 4; ++step) {
    const auto x = a.next(), y = b.next(), z = other.next();
    expect_consistent_shapes(x, 2, kSize);
    EXPECT_TRUE(at::equal(x.rows, y.rows));
    EXPECT_TRUE(at::equal(x.images, y.images));
    EXPECT_TRUE(at::equal(x.boxes, y.boxes));
    EXPECT_TRUE(at::equal(x.classes, y.classes));
    EXPECT_TRUE(at::equal(x.box_offsets, y.box_offsets));
    differs |= !at::equal(x.images, z.images);
    // Every box inside the image with positive size (at least the 2 px the filter keeps).
    boxes += x.boxes.size(0);
    if (x.boxes.size(0) > 0) {
      const auto bx = x.boxes;
      EXPECT_GE(bx.min().item<float>(), 0);
      EXPECT_LE(bx.max().item<float>(), kSize);
      EXPECT_GE((bx.select(1, 2) - bx.select(1, 0)).min().item<float>(), data::kMinBoxSide);
      EXPECT_GE((bx.select(1, 3) - bx.select(1, 1)).min().item<float>(), data::kMinBoxSide);
    }
    // The same sample computed here from (seed, epoch, row) alone: what any rank count would give.
    for (int64_t i = 0; i < 2; ++i) {
      const int64_t row = x.rows[i].item<int64_t>();
      const uint64_t key = data::detection_augment_key(o.seed, x.epoch, row);
      std::vector<data::Labeled> partners;
      mosaics += data::wants_mosaic(o.augment, key);
      if (data::wants_mosaic(o.augment, key))
        for (int64_t p : data::mosaic_partners(key, row, info.count)) partners.push_back(stored(info, p));
      const auto want = data::augment_detection(stored(info, row), partners, o.augment, kSize, key);
      EXPECT_TRUE(same_pixels(batch_image(x, i), want.image)) << "row " << row;
      const auto got = boxes_of(x, i);
      EXPECT_EQ(got.boxes, want.boxes) << "row " << row;
      EXPECT_EQ(got.classes, want.classes) << "row " << row;
    }
  }
  EXPECT_TRUE(differs) << "another seed gives other batches";
  // Counted over all ranks: a rank's 8 samples may all be empty, or all single images.
  int64_t total = 0, total_mosaics = 0;
  for (const auto& n : runtime().allgather(std::to_string(boxes))) total += std::stoll(n);
  for (const auto& n : runtime().allgather(std::to_string(mosaics))) total_mosaics += std::stoll(n);
  EXPECT_GT(total, 0);
  EXPECT_GT(total_mosaics, 0) << "the mosaic path was exercised";
}

TEST(DetectionLoader, CloseMosaicAndOutputSize) {
  // Mosaic certain but closed from epoch 0, and an identity affine without colour or flip: the
  // stored images come out unchanged.
  data::DetectionLoaderOptions o = augmented(3);
  o.augment.mosaic_prob = 1;
  o.augment.scale = o.augment.translate = o.augment.degrees = 0;
  o.augment.hsv_h = o.augment.hsv_s = o.augment.hsv_v = 0;
  o.augment.flip_prob = 0;
  o.close_mosaic_epoch = 0;
  {
    data::DetectionLoader loader(runtime(), o);
    const auto b = loader.next();
    for (int64_t i = 0; i < 2; ++i)
      EXPECT_TRUE(same_pixels(batch_image(b, i), stored_image(b.rows[i].item<int64_t>())));
  }
  // Another output size: images resized, boxes scaled, everything within the new size.
  o = augmented(3);
  o.image_size = 32;
  data::DetectionLoader small(runtime(), o);
  EXPECT_EQ(small.image_size(), 32);
  for (int step = 0; step < 3; ++step) {
    const auto b = small.next();
    expect_consistent_shapes(b, 2, 32);
    if (b.boxes.size(0) > 0) {
      EXPECT_GE(b.boxes.min().item<float>(), 0);
      EXPECT_LE(b.boxes.max().item<float>(), 32);
    }
  }
}

TEST(DetectionLoader, ResumesFromEpochAndPosition) {
  data::DetectionLoaderOptions o = augmented(8);
  data::DetectionLoader straight(runtime(), o);
  straight.next();
  const auto second = straight.next();
  o.position = second.next_position - straight.sampler().global_batch();  // start at the second batch
  data::DetectionLoader resumed(runtime(), o);
  const auto again = resumed.next();
  EXPECT_EQ(again.step, second.step);
  EXPECT_TRUE(at::equal(again.rows, second.rows));
  EXPECT_TRUE(at::equal(again.images, second.images));
  EXPECT_TRUE(at::equal(again.boxes, second.boxes));
}

// Destroyed mid-epoch with its queues full, or before its first batch, the loader stops its threads
// at once.
TEST(DetectionLoader, DestroyedWithBatchesInFlightStopsPromptly) {
  for (const bool take_one : {false, true}) {
    data::DetectionLoaderOptions o = augmented(5);
    o.prefetch = 1;
    const auto t0 = std::chrono::steady_clock::now();
    {
      data::DetectionLoader loader(runtime(), o);
      if (take_one) loader.next();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0) << take_one;
  }
}

TEST(DetectionLoader, BadInputIsAUserErrorNamingTheFileOrField) {
  data::PrepSyntheticOptions it;
  it.out = det_dir() + "/image_text.h5";
  it.count = 6;
  it.size = 32;
  it.captions_per_image = 3;
  it.context_length = 24;
  it.vocab_size = 200;
  data::prep_synthetic_image_text(runtime(), it);
  data::DetectionLoaderOptions o;
  o.path = it.out;
  o.batch_size = 1;
  const std::string kind = message_of([&] { data::DetectionLoader l(runtime(), o); });
  // The reader itself reads both kinds; only detection files have boxes.
  EXPECT_THROW(data::DatasetReader(it.out, data::IoDriver::POSIX).read_boxes({0}), meridian::DataError);
  EXPECT_NE(kind.find(it.out + ": attribute 'kind': the detection loader reads 'detection' files, not 'image_text'"),
            std::string::npos)
      << kind;
  o.path = det_file();
  o.augment.scale = 2;
  EXPECT_EQ(message_of([&] { data::DetectionLoader l(runtime(), o); }),
            "detection loader: augment.scale must be in [0, 0.95], got 2");
  o.augment.scale = 0.5;
  o.batch_size = 1000;
  const std::string too_few = message_of([&] { data::DetectionLoader l(runtime(), o); });
  EXPECT_NE(too_few.find(" images are fewer than one global batch ("), std::string::npos) << too_few;
  EXPECT_EQ(too_few.substr(too_few.find(");")), "); lower train.batch");
  o.batch_size = 1;
  o.path = det_dir() + "/missing.h5";
  EXPECT_NE(message_of([&] { data::DetectionLoader l(runtime(), o); }).find("missing.h5"), std::string::npos);
}

TEST(DetectionLoader, MosaicPartnersAreOtherRowsAndDependOnTheKeyOnly) {
  std::set<int64_t> seen;
  for (int64_t row = 0; row < 5; ++row) {
    for (uint64_t epoch = 0; epoch < 20; ++epoch) {
      const uint64_t key = data::detection_augment_key(1, int64_t(epoch), row);
      const auto p = data::mosaic_partners(key, row, 5);
      EXPECT_EQ(p, data::mosaic_partners(key, row, 5));
      for (int64_t r : p) {
        EXPECT_NE(r, row);
        EXPECT_GE(r, 0);
        EXPECT_LT(r, 5);
        seen.insert(r);
      }
    }
  }
  EXPECT_EQ(seen.size(), 5u) << "every row is somebody's partner";
  EXPECT_EQ(data::mosaic_partners(7, 0, 1), (std::array<int64_t, 3>{0, 0, 0})) << "a one-row dataset";
  EXPECT_NE(data::detection_augment_key(1, 0, 3), data::detection_augment_key(1, 1, 3));
  EXPECT_NE(data::detection_augment_key(1, 0, 3), data::detection_augment_key(2, 0, 3));
}
