// JPEG datasets (prep --encode jpeg, docs/formats.md version 2): the round trip against the drawn
// pixels, input JPEGs kept byte for byte, the decoding loaders against the serial reader, and what
// the format refuses (other versions, corrupt bytes), on 1, 2 and 4 ranks.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "data_test.h"
#include "meridian/data/dataset_reader.h"
#include "meridian/data/detection_loader.h"
#include "meridian/data/format.h"
#include "meridian/data/loader.h"
#include "meridian/data/prep.h"
#include "meridian/data/synthetic.h"
#include "meridian/data/synthetic_prep.h"
#include "mpi_test_main.h"

namespace fs = std::filesystem;
namespace data = meridian::data;
using meridian::test::message_of;
using meridian::test::runtime;
using meridian::test::shared_dir;

namespace {

constexpr int64_t kJpegCount = 37;
constexpr uint64_t kJpegSeed = 11;
constexpr int kJpegSize = 64;

data::PrepSyntheticOptions synthetic(const std::string& name, const std::string& encode, int quality) {
  data::PrepSyntheticOptions o;
  o.out = shared_dir() + "/" + name;
  o.count = kJpegCount;
  o.seed = kJpegSeed;
  o.size = kJpegSize;
  o.captions_per_image = 3;
  o.context_length = 24;
  o.vocab_size = 200;
  o.block = 4;
  o.encode = encode;
  o.quality = quality;
  o.overwrite = true;
  return o;
}

// Made once per process (collectively, on first use), at quality 90.
const std::string& jpeg_file() {
  static const std::string path = [] {
    const auto o = synthetic("jpeg90.h5", "jpeg", 90);
    const auto report = data::prep_synthetic_image_text(runtime(), o);
    EXPECT_EQ(report.written, kJpegCount);
    EXPECT_EQ(report.kept_source_bytes, 0) << "synthetic scenes have no input file";
    return o.out;
  }();
  return path;
}

// Peak signal-to-noise ratio of `a` against `b` (same size), in dB.
double psnr(const uint8_t* a, const uint8_t* b, size_t n) {
  double se = 0;
  for (size_t i = 0; i < n; ++i) se += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return se == 0 ? INFINITY : 10 * std::log10(255.0 * 255.0 * double(n) / se);
}

// Mean PSNR of every row of `path` against the drawn scene (this rank's rows, averaged over ranks).
double mean_psnr(const std::string& path) {
  data::DatasetReader reader(path, data::IoDriver::MPIO);
  double sum = 0;
  int64_t mine = 0;
  std::vector<uint8_t> image(size_t(kJpegSize) * kJpegSize * 3);
  for (int64_t row = runtime().rank(); row < kJpegCount; row += runtime().size(), ++mine) {
    reader.read_rows({row}, image.data(), nullptr, nullptr, nullptr);
    const auto scene = data::make_synthetic_scene(kJpegSeed, row, kJpegSize, 3);
    sum += psnr(image.data(), scene.image.data, image.size());
  }
  return double(runtime().sum(int64_t(std::llround(sum * 1000)))) / 1000 / double(runtime().sum(mine));
}

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Rank 0 edits `path` in place with `edit(file)` (HDF5, read-write); every rank waits.
void edit_file(const std::string& path, const std::function<void(hid_t)>& edit) {
  if (runtime().rank() == 0) {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    EXPECT_GE(f, 0) << path;
    if (f >= 0) edit(f), H5Fclose(f);
  }
  runtime().barrier();
}

void set_int_attr(hid_t file, const char* name, int64_t value) {
  const hid_t a = H5Aopen(file, name, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_INT64, &value);
  H5Aclose(a);
}

}  // namespace

TEST(Jpeg, RoundTripIsWithinTheJpegErrorOfTheDrawnPixels) {
  const auto info = data::validate_dataset(jpeg_file());
  EXPECT_EQ(info.format_version, 2);
  EXPECT_EQ(info.image_encoding, "jpeg");
  EXPECT_EQ(info.height, kJpegSize);
  EXPECT_EQ(info.width, kJpegSize);
  EXPECT_EQ(info.count, kJpegCount);
  EXPECT_LT(info.encoded_bytes, kJpegCount * kJpegSize * kJpegSize * 3 / 2)
      << "JPEG should be far smaller than the pixels";

  const double q90 = mean_psnr(jpeg_file());
  EXPECT_GT(q90, 30) << "quality 90 decodes close to the source";
  EXPECT_TRUE(std::isfinite(q90)) << "the images must have been encoded (lossy), not stored raw";
  const auto low = synthetic("jpeg30.h5", "jpeg", 30);
  data::prep_synthetic_image_text(runtime(), low);
  const double q30 = mean_psnr(low.out);
  EXPECT_LT(q30, q90 - 2) << "--quality must reach the encoder";
  EXPECT_LT(data::validate_dataset(low.out).encoded_bytes, info.encoded_bytes);

  // Everything but the images is what a raw prep of the same scenes stores.
  const auto raw_options = synthetic("raw.h5", "raw", 90);
  data::prep_synthetic_image_text(runtime(), raw_options);
  data::DatasetReader jpeg(jpeg_file(), data::IoDriver::POSIX), raw(raw_options.out, data::IoDriver::POSIX);
  EXPECT_EQ(raw.info().image_encoding, "raw");
  std::vector<int64_t> rows{0, 1, 2, 5, 36};
  std::vector<int32_t> t1(5 * 3 * 24), t2(t1.size()), l1(15), l2(15), c1(5), c2(5);
  jpeg.read_rows(rows, nullptr, t1.data(), l1.data(), c1.data());
  raw.read_rows(rows, nullptr, t2.data(), l2.data(), c2.data());
  EXPECT_EQ(t1, t2);
  EXPECT_EQ(l1, l2);
  EXPECT_EQ(c1, c2);
  EXPECT_EQ(jpeg.captions(5), raw.captions(5));
  EXPECT_EQ(jpeg.name(36), raw.name(36));
}

TEST(Jpeg, InputJpegsOfTheStoredSizeAreKeptByteForByte) {
  const std::string dir = shared_dir() + "/passthrough";
  if (runtime().rank() == 0) {
    fs::create_directories(dir + "/img");
    std::ofstream captions(dir + "/captions.jsonl");
    for (int i = 0; i < 6; ++i) {
      // 0-3: JPEGs at the stored size (kept); 4: a PNG (encoded); 5: a larger JPEG (resized, encoded).
      const int side = i == 5 ? 80 : 48;
      const auto scene = data::make_synthetic_scene(kJpegSeed, i, side, 1);
      cv::Mat bgr;
      cv::cvtColor(scene.image, bgr, cv::COLOR_RGB2BGR);
      const std::string name = "img/" + std::to_string(i) + (i == 4 ? ".png" : ".jpg");
      ASSERT_TRUE(cv::imwrite(dir + "/" + name, bgr, {cv::IMWRITE_JPEG_QUALITY, 75}));
      captions << "{\"image\": \"" << name << "\", \"captions\": [\"" << scene.captions[0] << "\"]}\n";
    }
  }
  runtime().barrier();
  data::PrepImageTextOptions o;
  o.images_dir = dir;
  o.captions_file = dir + "/captions.jsonl";
  o.size = 48;
  o.tokenizer = jpeg_file();
  o.out = dir + "/out.h5";
  o.overwrite = true;
  o.encode = "jpeg";
  o.block = 1;
  const auto report = data::prep_image_text(runtime(), o);
  EXPECT_EQ(report.written, 6);
  EXPECT_EQ(report.kept_source_bytes, 4);

  data::DatasetReader reader(o.out, data::IoDriver::POSIX);
  data::EncodedRows enc;
  reader.read_encoded({0, 1, 2, 3, 4, 5}, enc);
  for (int i = 0; i < 6; ++i) {
    const std::vector<uint8_t> stored(enc.bytes.begin() + enc.starts[i], enc.bytes.begin() + enc.starts[i + 1]);
    EXPECT_EQ(stored == file_bytes(dir + "/img/" + std::to_string(i) + (i == 4 ? ".png" : ".jpg")), i < 4)
        << "row " << i;
  }
  // The PNG went through the encoder: within the JPEG error of its pixels.
  std::vector<uint8_t> image(48 * 48 * 3);
  reader.read_rows({4}, image.data(), nullptr, nullptr, nullptr);
  EXPECT_GT(psnr(image.data(), data::make_synthetic_scene(kJpegSeed, 4, 48, 1).image.data, image.size()), 28);
}

TEST(Jpeg, LoadersDecodeTheSameImagesWithAnyNumberOfWorkers) {
  data::DatasetReader reader(jpeg_file(), data::IoDriver::POSIX);
  for (const bool augment : {false, true}) {
    data::LoaderOptions o;
    o.path = jpeg_file();
    o.batch_size = 5;
    o.seed = 3;
    o.augment = augment;
    o.crop_size = augment ? 40 : 0;
    o.workers = 1;
    data::Loader one(runtime(), o);
    o.workers = 3;
    data::Loader three(runtime(), o);
    for (int step = 0; step < 6; ++step) {  // past an epoch's end on 4 ranks
      const auto a = one.next(), b = three.next();
      ASSERT_TRUE(at::equal(a.rows, b.rows));
      EXPECT_TRUE(at::equal(a.images, b.images)) << "augment " << augment << " step " << step;
      EXPECT_TRUE(at::equal(a.tokens, b.tokens));
      if (augment) {
        EXPECT_EQ(a.images.sizes(), (at::IntArrayRef{5, 40, 40, 3}));
        continue;
      }
      for (int64_t i = 0; i < 5; ++i) {  // the serial reader's decode, row by row
        std::vector<uint8_t> image(kJpegSize * kJpegSize * 3);
        reader.read_rows({a.rows[i].item<int64_t>()}, image.data(), nullptr, nullptr, nullptr);
        EXPECT_EQ(0, std::memcmp(image.data(), a.images[i].data_ptr<uint8_t>(), image.size())) << "sample " << i;
      }
    }
  }
  data::LoaderOptions bad;
  bad.path = jpeg_file();
  bad.workers = 0;
  EXPECT_EQ(message_of([&] { data::Loader l(runtime(), bad); }), "data.workers: must be between 1 and 256, got 0");

  // Detection: a JPEG file's boxes arrive as with raw pixels, its images within the JPEG error.
  auto det = synthetic("det_jpeg.h5", "jpeg", 95);
  data::prep_synthetic_detection(runtime(), det);
  auto det_raw = synthetic("det_raw.h5", "raw", 95);
  data::prep_synthetic_detection(runtime(), det_raw);
  data::DetectionLoaderOptions d;
  d.batch_size = 4;
  d.augment.enabled = false;
  d.workers = 3;
  d.path = det.out;
  data::DetectionLoader jl(runtime(), d);
  d.path = det_raw.out;
  data::DetectionLoader rl(runtime(), d);
  for (int step = 0; step < 3; ++step) {
    const auto a = jl.next(), b = rl.next();
    ASSERT_TRUE(at::equal(a.rows, b.rows));
    EXPECT_TRUE(at::equal(a.boxes, b.boxes));
    EXPECT_TRUE(at::equal(a.box_offsets, b.box_offsets));
    const double db = psnr(a.images.data_ptr<uint8_t>(), b.images.data_ptr<uint8_t>(), size_t(a.images.numel()));
    EXPECT_TRUE(std::isfinite(db)) << "decoded from JPEG, not raw";
    EXPECT_GT(db, 28) << "within the JPEG error at quality 95 (4:2:0 chroma on drawn edges)";
  }
}

TEST(Jpeg, OtherFormatVersionsAndCorruptBytesAreNamed) {
  const std::string dir = shared_dir() + "/versions";
  const std::string v1 = dir + "/v1.h5", v3 = dir + "/v3.h5", bad = dir + "/bad.h5", offsets = dir + "/offsets.h5";
  const auto raw = synthetic("versions_raw.h5", "raw", 90);
  data::prep_synthetic_image_text(runtime(), raw);
  if (runtime().rank() == 0) {
    fs::create_directories(dir);
    for (const auto& [from, to] : {std::pair{raw.out, v1}, {raw.out, v3}, {jpeg_file(), bad}, {jpeg_file(), offsets}})
      fs::copy_file(from, to, fs::copy_options::overwrite_existing);
  }
  runtime().barrier();
  // A version-1 file (raw pixels, no image_encoding attribute) still reads.
  edit_file(v1, [](hid_t f) {
    set_int_attr(f, "format_version", 1);
    H5Adelete(f, "image_encoding");
  });
  const auto info = data::validate_dataset(v1);
  EXPECT_EQ(info.format_version, 1);
  EXPECT_EQ(info.image_encoding, "raw");
  data::DatasetReader old(v1, data::IoDriver::POSIX);
  std::vector<uint8_t> image(kJpegSize * kJpegSize * 3);
  old.read_rows({7}, image.data(), nullptr, nullptr, nullptr);
  EXPECT_EQ(0,
            std::memcmp(image.data(), data::make_synthetic_scene(kJpegSeed, 7, kJpegSize, 3).image.data, image.size()));

  edit_file(v3, [](hid_t f) { set_int_attr(f, "format_version", 3); });
  EXPECT_EQ(message_of([&] { data::validate_dataset(v3); }),
            v3 + ": attribute 'format_version': this meridian reads versions 1 to 2, the file has 3 (written by a "
                 "newer meridian)");

  // Row 5's first bytes overwritten: its read names the file and the row; other rows still read.
  int64_t start = 0;
  edit_file(bad, [&](hid_t f) {
    const hid_t off = H5Dopen2(f, "/image_offsets", H5P_DEFAULT), bytes = H5Dopen2(f, "/image_bytes", H5P_DEFAULT);
    std::vector<int64_t> all(kJpegCount + 1);
    H5Dread(off, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, all.data());
    start = all[5];
    const hid_t space = H5Dget_space(bytes);
    const hsize_t at = hsize_t(start), n = 4;
    H5Sselect_hyperslab(space, H5S_SELECT_SET, &at, nullptr, &n, nullptr);
    const hid_t mem = H5Screate_simple(1, &n, nullptr);
    const uint8_t zeros[4] = {0, 0, 0, 0};
    H5Dwrite(bytes, H5T_NATIVE_UINT8, mem, space, H5P_DEFAULT, zeros);
    H5Sclose(mem), H5Sclose(space), H5Dclose(bytes), H5Dclose(off);
  });
  data::DatasetReader corrupt(bad, data::IoDriver::POSIX);
  EXPECT_NO_THROW(corrupt.read_rows({4, 6}, std::vector<uint8_t>(2 * image.size()).data(), nullptr, nullptr, nullptr));
  const std::string m = message_of([&] { corrupt.read_rows({5}, image.data(), nullptr, nullptr, nullptr); });
  EXPECT_EQ(m.rfind(bad + ": /image_bytes row 5: not a JPEG", 0), 0u) << m;

  // Offsets that go backwards: the rows they bound are refused by name.
  edit_file(offsets, [](hid_t f) {
    const hid_t off = H5Dopen2(f, "/image_offsets", H5P_DEFAULT), space = H5Dget_space(off);
    const hsize_t at = 10, n = 1;
    const int64_t value = 1;
    H5Sselect_hyperslab(space, H5S_SELECT_SET, &at, nullptr, &n, nullptr);
    const hid_t mem = H5Screate_simple(1, &n, nullptr);
    H5Dwrite(off, H5T_NATIVE_INT64, mem, space, H5P_DEFAULT, &value);
    H5Sclose(mem), H5Sclose(space), H5Dclose(off);
  });
  data::DatasetReader backwards(offsets, data::IoDriver::POSIX);
  data::EncodedRows enc;
  const std::string m2 = message_of([&] { backwards.read_encoded({8, 9, 10}, enc); });
  EXPECT_EQ(m2.rfind(offsets + ": /image_offsets: row 9 has bytes [", 0), 0u) << m2;
}
