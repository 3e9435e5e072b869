// Datasets of many files (prep --out NAME.json): read as one file would be, exact resume across a
// file boundary, an interrupted prep finished with --resume, more files added with --append, what
// the index refuses, and COCO read in each rank's share; on 1, 2 and 4 ranks.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "data_test.h"
#include "meridian/data/dataset_reader.h"
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

constexpr int64_t kFilesCount = 37;
constexpr uint64_t kFilesSeed = 21;

data::PrepSyntheticOptions options(const std::string& out, int64_t count, uint64_t seed) {
  data::PrepSyntheticOptions o;
  o.out = shared_dir() + "/" + out;
  o.count = count;
  o.seed = seed;
  o.size = 32;
  o.captions_per_image = 2;
  o.context_length = 16;
  o.vocab_size = 200;
  o.block = 3;
  o.part_size = 10;  // 37 inputs: files of 10, 10, 10 and 7
  o.overwrite = true;
  return o;
}

// Every row of `a` and `b` (images, tokens, names) is the same.
void expect_same_rows(const std::string& a, const std::string& b) {
  data::DatasetReader ra(a, data::IoDriver::POSIX), rb(b, data::IoDriver::POSIX);
  ASSERT_EQ(ra.info().count, rb.info().count);
  const int64_t n = ra.info().count;
  std::vector<int64_t> rows(n);
  for (int64_t i = 0; i < n; ++i) rows[i] = i;
  const size_t K = size_t(ra.info().captions_per_sample), L = size_t(ra.info().context_length);
  std::vector<uint8_t> ia(n * ra.image_bytes()), ib(ia.size());
  std::vector<int32_t> ta(n * K * L), tb(ta.size());
  ra.read_rows(rows, ia.data(), ta.data(), nullptr, nullptr);
  rb.read_rows(rows, ib.data(), tb.data(), nullptr, nullptr);
  EXPECT_EQ(ia, ib);
  EXPECT_EQ(ta, tb);
  for (int64_t i = 0; i < n; i += 9) EXPECT_EQ(ra.name(i), rb.name(i)) << "row " << i;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

// Rank 0 writes `path` once every rank has read what it needed (it may be the file being replaced).
void write_json(const std::string& path, const nlohmann::json& j) {
  runtime().barrier();
  if (runtime().rank() == 0) std::ofstream(path) << j.dump(1);
  runtime().barrier();
}

}  // namespace

TEST(ManyFiles, ReadAsOneFileWithExactResumeAcrossAFileBoundary) {
  for (const std::string encode : {"raw", "jpeg"}) {
    auto one = options("one_" + encode + ".h5", kFilesCount, kFilesSeed);
    auto many = options("many_" + encode + ".json", kFilesCount, kFilesSeed);
    one.encode = many.encode = encode;
    data::prep_synthetic_image_text(runtime(), one);
    const auto report = data::prep_synthetic_image_text(runtime(), many);
    EXPECT_EQ(report.files, 4);
    EXPECT_EQ(report.written, kFilesCount);
    const auto info = data::validate_dataset(many.out);
    ASSERT_EQ(info.parts.size(), 4u);
    EXPECT_EQ(info.parts[3].count, 7);
    EXPECT_EQ(info.parts[1].path, shared_dir() + "/many_" + encode + "-00001.h5");
    EXPECT_EQ(info.count, kFilesCount);
    EXPECT_EQ(info.image_encoding, encode);
    expect_same_rows(one.out, many.out);  // every row, across all four files

    // The loader: the same batches from either; a start inside epoch 0 whose batch spans the files
    // 0/1 and 1/2 boundaries gives the batches the uninterrupted loader gives there.
    data::LoaderOptions lo;
    lo.batch_size = 4;
    lo.seed = 9;
    lo.augment = encode == "jpeg";
    lo.path = one.out;
    data::Loader a(runtime(), lo);
    lo.path = many.out;
    data::Loader b(runtime(), lo);
    std::vector<data::Batch> straight;
    for (int step = 0; step < 3; ++step) {
      straight.push_back(b.next());
      const auto x = a.next();
      EXPECT_TRUE(at::equal(x.rows, straight.back().rows));
      EXPECT_TRUE(at::equal(x.images, straight.back().images)) << encode << " step " << step;
      EXPECT_TRUE(at::equal(x.tokens, straight.back().tokens));
    }
    lo.position = straight[0].next_position;
    data::Loader resumed(runtime(), lo);
    for (int step = 1; step < 3; ++step) {
      const auto r = resumed.next();
      EXPECT_TRUE(at::equal(r.rows, straight[step].rows));
      EXPECT_TRUE(at::equal(r.images, straight[step].images)) << encode << " resumed step " << step;
    }
  }
}

TEST(ManyFiles, AnInterruptedPrepIsFinishedWithResume) {
  const auto full = options("full.json", kFilesCount, kFilesSeed);
  data::prep_synthetic_image_text(runtime(), full);
  // What a prep killed while writing its third file leaves: the index lists two finished files and
  // says complete: false; the third file is still a .tmp.
  auto cut = options("cut.json", kFilesCount, kFilesSeed);
  data::prep_synthetic_image_text(runtime(), cut);
  auto index = read_json(cut.out);
  index["complete"] = false;
  index["parts"].erase(2);
  index["parts"].erase(2);
  if (runtime().rank() == 0) {
    fs::rename(shared_dir() + "/cut-00002.h5", shared_dir() + "/cut-00002.h5.tmp");
    fs::remove(shared_dir() + "/cut-00003.h5");
  }
  write_json(cut.out, index);
  EXPECT_EQ(message_of([&] { data::validate_dataset(cut.out); }),
            cut.out +
                ": field 'complete': false: prep has not finished this dataset (interrupted? run the same prep "
                "with --resume)");
  cut.overwrite = false;
  EXPECT_EQ(message_of([&] { data::prep_synthetic_image_text(runtime(), cut); }),
            cut.out +
                ": exists (pass --overwrite to replace it, --resume to finish an interrupted prep, --append to "
                "add inputs)");
  auto other = cut;
  other.resume = true;
  other.count = kFilesCount + 1;
  EXPECT_EQ(message_of([&] { data::prep_synthetic_image_text(runtime(), other); }),
            "--resume: synthetic/21 has 38 entries now, cut-00000.h5 was made when it had 37: not the same inputs "
            "(--overwrite starts again)");

  cut.resume = true;
  const auto report = data::prep_synthetic_image_text(runtime(), cut);
  EXPECT_EQ(report.inputs, 17) << "only the inputs of the two missing files";
  EXPECT_EQ(report.files, 2);
  EXPECT_FALSE(fs::exists(shared_dir() + "/cut-00002.h5.tmp"));
  expect_same_rows(full.out, cut.out);
  EXPECT_EQ(message_of([&] { data::prep_synthetic_image_text(runtime(), cut); }),
            "--resume: " + cut.out + " is complete, there is nothing to resume (--append adds more inputs)");
}

TEST(ManyFiles, AppendAddsFilesOfTheSameKind) {
  auto base = options("grow.json", kFilesCount, kFilesSeed);
  data::prep_synthetic_image_text(runtime(), base);
  auto more = options("grow.json", 12, kFilesSeed + 1);
  more.append = true;
  more.overwrite = false;
  const auto report = data::prep_synthetic_image_text(runtime(), more);
  EXPECT_EQ(report.files, 2);
  const auto info = data::validate_dataset(base.out);
  EXPECT_EQ(info.count, kFilesCount + 12);
  ASSERT_EQ(info.parts.size(), 6u);
  data::DatasetReader reader(base.out, data::IoDriver::POSIX);
  std::vector<uint8_t> image(reader.image_bytes());
  for (int64_t row : {int64_t(0), kFilesCount - 1, kFilesCount, kFilesCount + 11}) {
    const bool appended = row >= kFilesCount;
    reader.read_rows({row}, image.data(), nullptr, nullptr, nullptr);
    const auto scene =
        data::make_synthetic_scene(appended ? kFilesSeed + 1 : kFilesSeed, appended ? row - kFilesCount : row, 32, 2);
    EXPECT_EQ(0, std::memcmp(image.data(), scene.image.data, image.size())) << "row " << row;
  }

  auto wrong = options("grow.json", 5, 3);
  wrong.append = true;
  wrong.size = 40;
  EXPECT_EQ(message_of([&] { data::prep_synthetic_image_text(runtime(), wrong); }),
            "--append: --size differs from " + base.out + "'s (32)");
  wrong.size = 32;
  wrong.resume = true;
  EXPECT_EQ(message_of([&] { data::prep_synthetic_image_text(runtime(), wrong); }),
            "--resume and --append: give one (resume finishes, append adds)");
  auto single = options("single.h5", 5, 3);
  single.append = true;
  EXPECT_EQ(message_of([&] { data::prep_synthetic_image_text(runtime(), single); }),
            "--append: only for a dataset of many files (--out NAME.json), not " + single.out);

  // An index whose parts disagree with it or with each other is refused by name.
  auto index = read_json(base.out);
  index["parts"][1]["count"] = 11;
  write_json(shared_dir() + "/bad_count.json", index);
  EXPECT_EQ(
      message_of([&] { data::validate_dataset(shared_dir() + "/bad_count.json"); }),
      shared_dir() + "/bad_count.json: field 'parts[1]': lists 11 rows, " + shared_dir() + "/grow-00001.h5 has 10");
  auto odd = options("odd.json", 4, 3);
  odd.context_length = 12;
  data::prep_synthetic_image_text(runtime(), odd);
  index = read_json(base.out);
  index["parts"][1] = read_json(odd.out)["parts"][0];
  write_json(shared_dir() + "/mixed.json", index);
  EXPECT_EQ(message_of([&] { data::validate_dataset(shared_dir() + "/mixed.json"); }),
            shared_dir() + "/odd-00000.h5: /tokens shape [N, K, L]: differs from the first part's (" + shared_dir() +
                "/grow-00000.h5)");
  index = read_json(base.out);
  index.erase("kind");
  write_json(shared_dir() + "/no_kind.json", index);
  EXPECT_EQ(message_of([&] { data::validate_dataset(shared_dir() + "/no_kind.json"); }),
            shared_dir() + "/no_kind.json: field 'kind': missing");
}

// COCO: every rank keeps only its own images' annotations (in any order of the file's lists), a
// detection dataset splits into files like any other, and a bad annotation is reported alike on
// every rank (the first in file order, whichever rank keeps its image).
TEST(ManyFiles, CocoIsReadInEachRanksShareAndSplitsIntoFiles) {
  const std::string dir = shared_dir() + "/coco";
  constexpr int kImages = 9;
  const auto box_of = [](int i, int b) { return std::array<int, 4>{2 + 3 * b, 4 + i, 6, 5}; };  // x, y, w, h
  const auto write_coco = [&](const std::string& path, bool annotations_first, const std::string& extra) {
    nlohmann::json images = nlohmann::json::array(), annotations = nlohmann::json::array();
    for (int i = 0; i < kImages; ++i) {
      images.push_back({{"id", 100 + i}, {"file_name", "img/" + std::to_string(i) + ".png"}});
      for (int b = 0; b < i % 3; ++b) {
        const auto x = box_of(i, b);
        annotations.push_back({{"image_id", 100 + i}, {"category_id", 1 + b}, {"bbox", {x[0], x[1], x[2], x[3]}}});
      }
    }
    std::string text = "{";
    const std::string im = "\"images\": " + images.dump(), an = "\"annotations\": " + annotations.dump();
    text += annotations_first ? an + ", " + im : im + ", " + an;
    text += ", \"categories\": [{\"id\": 2, \"name\": \"b\"}, {\"id\": 1, \"name\": \"a\"}]" + extra + "}";
    if (runtime().rank() == 0) std::ofstream(path) << text;
  };
  if (runtime().rank() == 0) {
    fs::create_directories(dir + "/img");
    for (int i = 0; i < kImages; ++i)
      cv::imwrite(dir + "/img/" + std::to_string(i) + ".png", cv::Mat(32, 32, CV_8UC3, cv::Scalar(10 * i, 0, 0)));
  }
  write_coco(dir + "/images_first.json", false, "");
  write_coco(dir + "/annotations_first.json", true, "");
  runtime().barrier();
  for (const std::string coco : {"images_first", "annotations_first"}) {
    data::PrepDetectionOptions o;
    o.images_dir = dir;
    o.coco = dir + "/" + coco + ".json";
    o.size = 32;
    o.block = 1;
    o.part_size = 4;  // files of 4, 4 and 1 images
    o.out = dir + "/" + coco + "_out.json";
    o.overwrite = true;
    const auto report = data::prep_detection(runtime(), o);
    EXPECT_EQ(report.files, 3);
    const auto info = data::validate_dataset(o.out);
    ASSERT_EQ(info.count, kImages);
    EXPECT_EQ(info.class_names, (std::vector<std::string>{"a", "b"}));
    data::DatasetReader reader(o.out, data::IoDriver::POSIX);
    std::vector<int64_t> rows(kImages);
    for (int i = 0; i < kImages; ++i) rows[i] = i;
    const auto boxes = reader.read_boxes(rows);
    for (int i = 0; i < kImages; ++i) {
      ASSERT_EQ(boxes[i].boxes.size(), size_t(i % 3)) << coco << " image " << i;
      for (int b = 0; b < i % 3; ++b) {
        const auto x = box_of(i, b);
        EXPECT_EQ(boxes[i].boxes[b],
                  (std::array<float, 4>{float(x[0]), float(x[1]), float(x[0] + x[2]), float(x[1] + x[3])}));
        EXPECT_EQ(boxes[i].classes[b], b);
      }
    }
  }
  // Two bad annotations (the images' owners differ): every rank names the first.
  write_coco(dir + "/bad.json", false, "");
  runtime().barrier();
  auto bad = read_json(dir + "/bad.json");
  bad["annotations"][4]["image_id"] = 999;
  bad["annotations"][2]["category_id"] = 7;
  write_json(dir + "/bad.json", bad);
  data::PrepDetectionOptions o;
  o.images_dir = dir;
  o.coco = dir + "/bad.json";
  o.size = 32;
  o.block = 1;
  o.out = dir + "/bad.h5";
  EXPECT_EQ(message_of([&] { data::prep_detection(runtime(), o); }),
            o.coco + ": annotations[2]: category_id not in 'categories'");
}
