// prep -> file -> validate -> reader -> loader, on 2 and 4 ranks, against what was put in
// (synthetic scenes are deterministic, so every row's pixels and captions are known).
#include <gtest/gtest.h>
#include <tiffio.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <opencv2/imgcodecs.hpp>
#include <set>
#include <thread>

#include "data_test.h"
#include "meridian/core/error.h"
#include "meridian/data/dataset_reader.h"
#include "meridian/data/format.h"
#include "meridian/data/loader.h"
#include "meridian/data/prep.h"
#include "meridian/data/synthetic.h"
#include "meridian/data/synthetic_prep.h"
#include "meridian/data/tokenizer.h"
#include "mpi_test_main.h"

namespace fs = std::filesystem;
using meridian::test::runtime;
namespace data = meridian::data;

const std::string& meridian::test::shared_dir() {
  static const std::string dir = shared_temp_dir("meridian_data_test");
  return dir;
}

namespace {

using meridian::test::shared_dir;

constexpr int64_t kCount = 37;  // not a multiple of any block x ranks
constexpr uint64_t kSeed = 11;

// The small image-text fixture's options: 32 px scenes, 3 captions of 24 tokens.
data::PrepSyntheticOptions small_synthetic(const std::string& name, int64_t count, uint64_t seed) {
  data::PrepSyntheticOptions o;
  o.out = shared_dir() + "/" + name;
  o.count = count;
  o.seed = seed;
  o.size = 32;
  o.captions_per_image = 3;
  o.context_length = 24;
  o.vocab_size = 200;
  return o;
}

const std::string& synthetic_file() {
  static std::string path = [] {
    data::PrepSyntheticOptions o = small_synthetic("synthetic.h5", kCount, kSeed);
    o.block = 4;
    const auto report = data::prep_synthetic_image_text(runtime(), o);
    EXPECT_EQ(report.written, kCount);
    EXPECT_EQ(report.skipped_count, 0);
    return o.out;
  }();
  return path;
}

using meridian::test::message_of;

}  // namespace

TEST(Prep, SyntheticFileValidatesAndHoldsExactlyWhatWasDrawn) {
  const auto info = data::validate_dataset(synthetic_file());
  EXPECT_EQ(info.count, kCount);
  EXPECT_EQ(info.height, 32);
  EXPECT_EQ(info.captions_per_sample, 3);
  EXPECT_EQ(info.context_length, 24);
  EXPECT_EQ(info.class_names, data::synthetic_scene_classes());
  EXPECT_EQ(info.image_chunk, (std::vector<uint64_t>{1, 32, 32, 3}));
  EXPECT_FALSE(fs::exists(synthetic_file() + ".tmp"));

  data::DatasetReader reader(synthetic_file(), data::IoDriver::MPIO);
  const auto tok = reader.tokenizer();
  // Each rank checks a different subset of rows; every row is checked by some rank.
  for (int64_t row = runtime().rank(); row < kCount; row += runtime().size()) {
    const auto scene = data::make_synthetic_scene(kSeed, row, 32, 3);
    std::vector<uint8_t> image(32 * 32 * 3);
    std::vector<int32_t> tokens(3 * 24), lengths(3), label(1);
    reader.read_rows({row}, image.data(), tokens.data(), lengths.data(), label.data());
    EXPECT_EQ(0, std::memcmp(image.data(), scene.image.data, image.size())) << "row " << row;
    EXPECT_EQ(label[0], scene.label);
    EXPECT_EQ(reader.name(row), "synthetic/11/" + std::to_string(row)) << "rows keep the input order";
    EXPECT_EQ(reader.captions(row), scene.captions);
    std::vector<int32_t> want(24);
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(lengths[k], tok.encode(scene.captions[k], 24, want.data()));
      EXPECT_TRUE(std::equal(want.begin(), want.end(), tokens.begin() + k * 24)) << "row " << row << " caption " << k;
    }
  }
}

TEST(Loader, OneEpochCoversEveryRowOnceAcrossRanksAndMatchesTheFile) {
  data::LoaderOptions o;
  o.path = synthetic_file();
  o.batch_size = 3;
  o.seed = 5;
  o.prefetch = 2;
  data::Loader loader(runtime(), o);
  const auto& s = loader.sampler();
  data::DatasetReader reader(synthetic_file(), data::IoDriver::POSIX);
  std::string mine;
  for (int64_t step = 0; step < s.steps_per_epoch(); ++step) {
    const auto b = loader.next();
    EXPECT_EQ(b.epoch, 0);
    EXPECT_EQ(b.step, step);
    ASSERT_EQ(b.images.sizes(), (at::IntArrayRef{3, 32, 32, 3}));
    ASSERT_EQ(b.tokens.sizes(), (at::IntArrayRef{3, 24}));
    for (int64_t i = 0; i < 3; ++i) {
      const int64_t row = b.rows[i].item<int64_t>();
      std::vector<uint8_t> image(32 * 32 * 3);
      std::vector<int32_t> tokens(3 * 24), lengths(3), label(1);
      reader.read_rows({row}, image.data(), tokens.data(), lengths.data(), label.data());
      EXPECT_EQ(0, std::memcmp(image.data(), b.images[i].data_ptr<uint8_t>(), image.size()));
      EXPECT_EQ(b.labels[i].item<int32_t>(), label[0]);
      // The batch's caption is one of the row's K captions.
      bool found = false;
      for (int k = 0; k < 3; ++k)
        found |= std::equal(tokens.begin() + k * 24, tokens.begin() + (k + 1) * 24, b.tokens[i].data_ptr<int32_t>());
      EXPECT_TRUE(found) << "row " << row;
      mine += std::to_string(row) + ",";
    }
  }
  // Gather every rank's rows: no row twice, and as many as the epoch has.
  std::set<int64_t> all;
  int64_t total = 0;
  for (const auto& text : runtime().allgather(mine)) {
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) all.insert(std::stoll(item)), ++total;
  }
  EXPECT_EQ(total, s.epoch_samples());
  EXPECT_EQ(int64_t(all.size()), total) << "a row was read by two ranks";
  // The next batch starts epoch 1.
  EXPECT_EQ(loader.next().epoch, 1);
}

TEST(Loader, ResumesFromEpochAndPosition) {
  data::LoaderOptions o;
  o.path = synthetic_file();
  o.batch_size = 2;
  o.seed = 8;
  data::Loader straight(runtime(), o);
  straight.next();
  const auto second = straight.next();
  o.position = second.next_position - straight.sampler().global_batch();  // start at the second batch
  data::Loader resumed(runtime(), o);
  const auto again = resumed.next();
  EXPECT_TRUE(at::equal(again.rows, second.rows));
  EXPECT_TRUE(at::equal(again.images, second.images));
}

TEST(Loader, RanksThatSeeDifferentFilesAreToldWhichAndWhere) {
  // The classic multi-node failure: the data path names a different file on one node. Here rank 0
  // reads one synthetic file, the others another; every rank must get the error naming the rank.
  const data::PrepSyntheticOptions other = small_synthetic("other.h5", 12, 99);
  data::prep_synthetic_image_text(runtime(), other);
  data::LoaderOptions o;
  o.path = runtime().rank() == 0 ? synthetic_file() : other.out;
  o.batch_size = 2;
  const std::string message = message_of([&] { data::Loader loader(runtime(), o); });
  if (runtime().size() == 1) {
    EXPECT_EQ(message, "<no UserError>");  // one rank cannot disagree with itself
  } else {
    EXPECT_NE(message.find(": rank 1 on " + runtime().host() + " sees a different dataset than rank 0 on " +
                           runtime().host()),
              std::string::npos)
        << message;
  }
}

TEST(Loader, AugmentationIsDeterministicAndChangesPixels) {
  auto image = at::arange(32 * 32 * 3, at::kInt).remainder(251).to(at::kByte).reshape({32, 32, 3});
  const auto a = data::augment_image(image, 24, 42), b = data::augment_image(image, 24, 42),
             c = data::augment_image(image, 24, 43);
  EXPECT_EQ(a.sizes(), (at::IntArrayRef{24, 24, 3}));
  EXPECT_TRUE(at::equal(a, b));
  EXPECT_FALSE(at::equal(a, c));
}

// Destroying a loader mid-epoch while its threads are blocked on full queues (prefetch 1 and more,
// with and without the augment thread) returns at once: the threads stop, nothing waits for a
// consumer.
TEST(Loader, DestroyedMidEpochWithBatchesInFlightStopsPromptly) {
  for (const bool augment : {false, true}) {
    for (const int prefetch : {1, 3}) {
      data::LoaderOptions o;
      o.path = synthetic_file();
      o.batch_size = 2;
      o.prefetch = prefetch;
      o.augment = augment;
      auto loader = std::make_unique<data::Loader>(runtime(), o);
      loader->next();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the queues fill up
      const auto t0 = std::chrono::steady_clock::now();
      loader.reset();
      EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0)
          << "augment " << augment << ", prefetch " << prefetch;
    }
  }
}

TEST(Prep, RefusesAnExistingOutputWithoutOverwrite) {
  data::PrepSyntheticOptions o;
  o.out = synthetic_file();
  o.count = 4;
  o.size = 32;
  EXPECT_NE(message_of([&] { data::prep_synthetic_image_text(runtime(), o); }).find("exists (pass --overwrite"),
            std::string::npos);
}

TEST(Prep, BadInputsAreReportedWithFileAndLine) {
  const std::string dir = shared_dir() + "/bad";
  if (runtime().rank() == 0) {
    fs::create_directories(dir + "/img");
    std::ofstream(dir + "/img/a.png") << "not an image";
    std::ofstream(dir + "/broken.jsonl") << "{\"image\": \"img/a.png\", \"captions\": [\"x\"]}\n{\"image\": 3}\n";
    std::ofstream(dir + "/bad.csv") << "image,caption\nimg/a.png,\"unterminated\n";
    std::ofstream(dir + "/empty.csv") << "image,caption\nimg/a.png,\nimg/b.png,a caption\n";
    std::ofstream(dir + "/ok.jsonl") << "{\"image\": \"img/a.png\", \"captions\": [\"a broken image\"]}\n"
                                     << "{\"image\": \"img/missing.png\", \"captions\": [\"gone\"]}\n";
  }
  runtime().barrier();
  data::PrepImageTextOptions o;
  o.images_dir = dir;
  o.size = 32;
  o.vocab_size = 50;
  o.out = dir + "/out.h5";
  o.captions_file = dir + "/broken.jsonl";
  EXPECT_EQ(message_of([&] { data::prep_image_text(runtime(), o); }),
            dir + "/broken.jsonl: line 2: expected an object with a string field 'image'");
  o.captions_file = dir + "/bad.csv";
  EXPECT_EQ(message_of([&] { data::prep_image_text(runtime(), o); }),
            dir + "/bad.csv: line 2: unterminated quoted field");
  o.captions_file = dir + "/empty.csv";
  EXPECT_EQ(message_of([&] { data::prep_image_text(runtime(), o); }),
            dir + "/empty.csv: line 2: no caption for 'img/a.png'");
  data::PrepSyntheticOptions tiny;
  tiny.out = dir + "/tiny.h5";
  tiny.size = 16;
  EXPECT_EQ(message_of([&] { data::prep_synthetic_detection(runtime(), tiny); }),
            "--size: synthetic scenes need at least 32 pixels, got 16");
  // Unreadable and missing images: skipped and listed; with --strict, fatal. Either way no file.
  o.captions_file = dir + "/ok.jsonl";
  o.strict = true;
  EXPECT_NE(message_of([&] { data::prep_image_text(runtime(), o); }).find("--strict: img/"), std::string::npos);
  o.strict = false;
  EXPECT_NE(message_of([&] { data::prep_image_text(runtime(), o); }).find("no input could be read"), std::string::npos);
  EXPECT_FALSE(fs::exists(o.out));
}

TEST(Prep, DecodesSixteenBitGrayAndChoosesBands) {
  // Hand-made images with known pixels: a 16-bit RGB PNG (stretched by its maximum), a gray PNG
  // (replicated to RGB), a non-square image (shorter side resized, centre cropped), read through a
  // CSV index; then the same with --bands 3,2,1 (R and B swapped).
  const std::string dir = shared_dir() + "/decode";
  if (runtime().rank() == 0) {
    fs::create_directories(dir);
    cv::Mat deep(16, 16, CV_16UC3, cv::Scalar(1000, 500, 250));  // OpenCV order B, G, R
    cv::imwrite(dir + "/deep.png", deep);
    cv::imwrite(dir + "/gray.png", cv::Mat(16, 16, CV_8UC1, cv::Scalar(77)));
    cv::Mat wide(16, 32, CV_8UC3, cv::Scalar(0, 0, 0));
    wide(cv::Rect(8, 0, 16, 16)).setTo(cv::Scalar(10, 20, 30));  // the centre square
    cv::imwrite(dir + "/wide.png", wide);
    std::ofstream(dir + "/index.csv") << "image,caption,class\ndeep.png,\"deep, sixteen bit\",a\ngray.png,gray,b\n"
                                      << "gray.png,still gray,b\nwide.png,wide,a\n";
  }
  runtime().barrier();
  data::PrepImageTextOptions o;
  o.images_dir = dir;
  o.captions_file = dir + "/index.csv";
  o.size = 16;
  o.captions_per_image = 2;
  o.vocab_size = 40;
  o.out = dir + "/plain.h5";
  EXPECT_EQ(data::prep_image_text(runtime(), o).written, 3);
  o.out = dir + "/swapped.h5";
  o.bands = {3, 2, 1};
  const auto swapped = data::prep_image_text(runtime(), o);
  EXPECT_EQ(swapped.written, 2);  // the one-band gray image has no band 3: skipped and reported
  EXPECT_EQ(swapped.skipped_count, 1);
  if (runtime().rank() == 0) {
    ASSERT_EQ(swapped.skipped.size(), 1u);
    EXPECT_EQ(swapped.skipped[0], "gray.png: --bands asks for band 3 but the image has 1");
  }

  const auto pixel = [](const std::string& file, int64_t row) {
    data::DatasetReader reader(file, data::IoDriver::POSIX);
    std::vector<uint8_t> image(16 * 16 * 3);
    reader.read_rows({row}, image.data(), nullptr, nullptr, nullptr);
    const size_t centre = (8 * 16 + 8) * 3;
    return std::vector<int>{image[centre], image[centre + 1], image[centre + 2]};
  };
  EXPECT_EQ(pixel(dir + "/plain.h5", 0), (std::vector<int>{64, 128, 255}));  // R 250, G 500, B 1000 of max 1000
  EXPECT_EQ(pixel(dir + "/plain.h5", 1), (std::vector<int>{77, 77, 77}));
  EXPECT_EQ(pixel(dir + "/plain.h5", 2), (std::vector<int>{30, 20, 10}));
  EXPECT_EQ(pixel(dir + "/swapped.h5", 0), (std::vector<int>{255, 128, 64}));
  data::DatasetReader reader(dir + "/plain.h5", data::IoDriver::POSIX);
  EXPECT_EQ(reader.captions(0), (std::vector<std::string>{"deep, sixteen bit", "deep, sixteen bit"}));
  EXPECT_EQ(reader.captions(1), (std::vector<std::string>{"gray", "still gray"}));
  EXPECT_EQ(reader.info().class_names, (std::vector<std::string>{"a", "b"}));
}

TEST(Detection, SyntheticBoxesArriveExactlyPerRow) {
  data::PrepSyntheticOptions o;
  o.out = shared_dir() + "/det.h5";
  o.count = 23;
  o.seed = 3;
  o.size = 64;
  o.block = 2;
  const auto report = data::prep_synthetic_detection(runtime(), o);
  int64_t boxes = 0;
  for (int64_t i = 0; i < o.count; ++i) boxes += int64_t(data::make_synthetic_scene(3, i, 64, 1).boxes.size());
  EXPECT_EQ(report.boxes, boxes);
  const auto info = data::validate_dataset(o.out);
  EXPECT_EQ(info.kind, "detection");
  EXPECT_EQ(info.box_count, boxes);
  EXPECT_EQ(info.class_names, data::synthetic_object_classes());
  for (int64_t row = runtime().rank(); row < o.count; row += runtime().size()) {
    const auto scene = data::make_synthetic_scene(3, row, 64, 1);
    const auto got = meridian::test::row_boxes(info, row);
    EXPECT_EQ(got.boxes, scene.boxes) << "row " << row;
    EXPECT_EQ(got.classes, std::vector<int32_t>(scene.box_classes.begin(), scene.box_classes.end())) << "row " << row;
  }
  // The reader opens detection files (tests/data/detection_loader_mpi_test.cpp reads them); the
  // image-text loader refuses one with the reason, on every rank.
  EXPECT_EQ(data::DatasetReader(o.out, data::IoDriver::POSIX).info().kind, "detection");
  data::LoaderOptions lo;
  lo.path = o.out;
  lo.batch_size = 1;
  EXPECT_NE(message_of([&] {
              data::Loader l(runtime(), lo);
            }).find(o.out + ": attribute 'kind': the image-text loader reads 'image_text' files, not 'detection'"),
            std::string::npos);
}

TEST(Prep, AProgramsOwnRowsAreWrittenAndAFailingRowIsSkippedAndNamed) {
  // A generator that is not the synthetic one: row i is a 32 px image of value 10 i with one box
  // (i, i, i + 8, i + 8) of class i % 2; row 4 throws. The file holds the other 8 rows, in order.
  data::ImageGenerator g;
  g.kind = "detection";
  g.count = 9;
  g.source = "ramp";
  g.class_names = {"even", "odd"};
  g.make = [](int64_t i) {
    if (i == 4) throw std::runtime_error("no such ramp");
    data::GeneratedImage d;
    d.image = cv::Mat(32, 32, CV_8UC3, cv::Scalar::all(double(10 * i)));
    d.name = "ramp/" + std::to_string(i);
    d.boxes = {{float(i), float(i), float(i + 8), float(i + 8)}};
    d.box_classes = {int32_t(i % 2)};
    return d;
  };
  data::PrepCommon o;
  o.out = shared_dir() + "/ramp.h5";
  o.size = 32;
  o.block = 2;
  const auto report = data::prep_generated_images(runtime(), o, g);
  EXPECT_EQ(report.written, 8);
  EXPECT_EQ(report.skipped_count, 1);
  if (runtime().rank() == 0) {
    ASSERT_EQ(report.skipped.size(), 1u);
    EXPECT_EQ(report.skipped[0], "entry 4: no such ramp");
  }
  const auto info = data::validate_dataset(o.out);
  EXPECT_EQ(info.kind, "detection");
  EXPECT_EQ(info.class_names, g.class_names);
  data::DatasetReader reader(o.out, data::IoDriver::POSIX);
  for (int64_t row = 0; row < 8; ++row) {
    const int64_t i = row < 4 ? row : row + 1;
    EXPECT_EQ(reader.name(row), "ramp/" + std::to_string(i));
    const auto got = meridian::test::row_boxes(info, row);
    EXPECT_EQ(got.boxes, (std::vector<std::array<float, 4>>{{float(i), float(i), float(i + 8), float(i + 8)}}));
    EXPECT_EQ(got.classes, std::vector<int32_t>{int32_t(i % 2)});
  }

  // Text: the records as made, the prompt without loss.
  data::TextGenerator t;
  t.count = 5;
  t.source = "counting";
  t.make = [](int64_t i) {
    return data::TextRecord{{{"Count to " + std::to_string(i + 1) + ".", std::string(size_t(i + 1), '1')}}};
  };
  o.out = shared_dir() + "/counting.h5";
  o.vocab_size = 400;
  t.tokenizer_corpus = [&] {
    std::vector<std::string> corpus;
    for (int64_t i = 0; i < t.count; ++i)
      corpus.push_back(t.make(i).exchanges[0].prompt), corpus.push_back(t.make(i).exchanges[0].response);
    return corpus;
  };
  EXPECT_EQ(data::prep_generated_text(runtime(), o, t).written, 5);
  const auto summary = data::summarize(data::validate_dataset(o.out), 5);
  ASSERT_EQ(summary.examples.size(), 5u);
  EXPECT_EQ(summary.examples[2].decoded, "111");
  t.count = 0;
  o.out = shared_dir() + "/no_records.h5";
  EXPECT_EQ(message_of([&] { data::prep_generated_text(runtime(), o, t); }), "prep: no input records in counting");
}

TEST(Detection, YoloAndCocoGiveTheSameLetterboxedBoxes) {
  // a.png is 64 x 32 with one box centred at (32, 16), 16 x 16: letterboxed to 32 px (scale 1/2,
  // 8 px bands above and below) it becomes (12, 12, 20, 20). b.png (32 x 32) has one box filling it
  // in COCO and no label file in YOLO. c.png's label file is malformed: skipped and reported.
  const std::string dir = shared_dir() + "/yolo";
  if (runtime().rank() == 0) {
    fs::create_directories(dir + "/images/sub");
    fs::create_directories(dir + "/labels/sub");
    cv::imwrite(dir + "/images/a.png", cv::Mat(32, 64, CV_8UC3, cv::Scalar(0, 255, 0)));
    cv::imwrite(dir + "/images/sub/b.png", cv::Mat(32, 32, CV_8UC3, cv::Scalar(255, 0, 0)));
    cv::imwrite(dir + "/images/sub/c.png", cv::Mat(32, 32, CV_8UC3, cv::Scalar(0, 0, 255)));
    std::ofstream(dir + "/labels/a.txt") << "0 0.5 0.5 0.25 0.5\n";
    std::ofstream(dir + "/labels/sub/c.txt") << "1 0.5\n";
    std::ofstream(dir + "/names.txt") << "car\nboat\n";
    std::ofstream(dir + "/coco.json")
        << R"({"images": [{"id": 4, "file_name": "a.png"}, {"id": 5, "file_name": "sub/b.png"}],
      "categories": [{"id": 9, "name": "boat"}, {"id": 7, "name": "car"}],
      "annotations": [{"image_id": 4, "category_id": 7, "bbox": [24, 8, 16, 16]},
                      {"image_id": 5, "category_id": 9, "bbox": [0, 0, 32, 32]},
                      {"image_id": 5, "category_id": 9, "bbox": [1, 1, 2, 2], "iscrowd": 1}]})";
  }
  runtime().barrier();
  data::PrepDetectionOptions o;
  o.images_dir = dir + "/images";
  o.labels_dir = dir + "/labels";
  o.class_names_file = dir + "/names.txt";
  o.size = 32;
  o.out = dir + "/yolo.h5";
  const auto yolo = data::prep_detection(runtime(), o);
  EXPECT_EQ(yolo.written, 2);
  EXPECT_EQ(yolo.boxes, 1);
  EXPECT_EQ(yolo.skipped_count, 1);
  if (runtime().rank() == 0) {
    ASSERT_EQ(yolo.skipped.size(), 1u);
    EXPECT_NE(yolo.skipped[0].find("c.txt: line 1: expected 'class cx cy w h'"), std::string::npos) << yolo.skipped[0];
  }
  const auto yolo_info = data::validate_dataset(o.out);
  const auto a = meridian::test::row_boxes(yolo_info, 0);
  EXPECT_EQ(a.boxes, (std::vector<std::array<float, 4>>{{12, 12, 20, 20}}));
  EXPECT_EQ(a.classes, (std::vector<int32_t>{0}));
  EXPECT_TRUE(meridian::test::row_boxes(yolo_info, 1).boxes.empty());
  EXPECT_EQ(yolo_info.class_names, (std::vector<std::string>{"car", "boat"}));

  o.labels_dir.clear();
  o.class_names_file.clear();
  o.coco = dir + "/coco.json";
  o.out = dir + "/coco.h5";
  const auto coco = data::prep_detection(runtime(), o);
  EXPECT_EQ(coco.written, 2);
  EXPECT_EQ(coco.boxes, 2);  // the crowd region is not an instance
  const auto coco_info = data::validate_dataset(o.out);
  EXPECT_EQ(coco_info.class_names, (std::vector<std::string>{"car", "boat"}));  // sorted by id
  EXPECT_EQ(meridian::test::row_boxes(coco_info, 0).boxes, a.boxes);
  EXPECT_EQ(meridian::test::row_boxes(coco_info, 0).classes, (std::vector<int32_t>{0}));
  EXPECT_EQ(meridian::test::row_boxes(coco_info, 1).boxes, (std::vector<std::array<float, 4>>{{0, 0, 32, 32}}));
  EXPECT_EQ(meridian::test::row_boxes(coco_info, 1).classes, (std::vector<int32_t>{1}));
  EXPECT_EQ(message_of([&] {
              data::PrepDetectionOptions both = o;
              both.labels_dir = dir + "/labels";
              data::prep_detection(runtime(), both);
            }),
            "prep detection: give either --labels DIR (YOLO) or --coco FILE");
}

TEST(Text, InstructionAndPlainRecordsBecomeTokensWithLossMasks) {
  const std::string dir = shared_dir() + "/text";
  if (runtime().rank() == 0) {
    fs::create_directories(dir);
    std::ofstream(dir + "/sft.jsonl")
        << R"({"instruction": "Name the colour of grass.", "output": "Green."})"
        << "\n"
        << R"({"instruction": "Add the numbers.", "input": "2 and 3", "output": "2 + 3 = 5"})"
        << "\n\n"
        << R"({"text": "Plain text for continued pre-training.\nSecond line."})"
        << "\n";
    std::ofstream(dir + "/bad.jsonl") << R"({"instruction": "no output"})"
                                      << "\n";
  }
  runtime().barrier();
  data::PrepTextOptions o;
  o.jsonl = dir + "/sft.jsonl";
  o.out = dir + "/sft.h5";
  o.vocab_size = 400;
  o.block = 1;  // every rank gets a record when there are enough
  const auto report = data::prep_text(runtime(), o);
  EXPECT_EQ(report.written, 3);
  const auto info = data::validate_dataset(o.out);
  EXPECT_EQ(info.kind, "text");
  EXPECT_EQ(info.count, 3);
  EXPECT_EQ(info.token_count, report.tokens);
  // Rebuild the expected stream with the stored tokenizer: bos, prompt (no loss), response + eos (loss).
  const auto summary = data::summarize(info, 3);
  ASSERT_EQ(summary.examples.size(), 3u);
  EXPECT_NE(summary.examples[0].caption.find("### Instruction:\nName the colour of grass.\n\n### Response:\n"),
            std::string::npos)
      << summary.examples[0].caption;
  EXPECT_EQ(summary.examples[0].decoded, "Green.");
  EXPECT_NE(summary.examples[1].caption.find("### Input:\n2 and 3"), std::string::npos);
  EXPECT_EQ(summary.examples[1].decoded, "2 + 3 = 5");
  EXPECT_EQ(summary.examples[2].caption, "");  // plain text: no prompt, loss on everything
  EXPECT_EQ(summary.examples[2].decoded, "Plain text for continued pre-training.\nSecond line.");
  EXPECT_GT(summary.supervised_fraction, 0.0);
  EXPECT_LT(summary.supervised_fraction, 1.0);

  o.jsonl = dir + "/bad.jsonl";
  o.out = dir + "/bad.h5";
  EXPECT_EQ(message_of([&] { data::prep_text(runtime(), o); }),
            dir + "/bad.jsonl: line 1: an instruction record needs 'output'");

  data::PrepSyntheticOptions so;
  so.out = dir + "/synthetic_text.h5";
  so.count = 41;
  so.vocab_size = 1000;
  so.block = 3;
  const auto synthetic = data::prep_synthetic_text(runtime(), so);
  EXPECT_EQ(synthetic.written, 41);
  EXPECT_EQ(data::validate_dataset(so.out).token_count, synthetic.tokens);
}

TEST(Prep, MultiBandTiffBandsAreChosenWithBands) {
  // A 5-band 16-bit TIFF (OpenCV reads at most 4 bands): band b holds 1000 * b everywhere; with
  // --bands 5,3,1 the stored RGB is band 5, 3, 1 stretched by the maximum (5000).
  const std::string dir = shared_dir() + "/multiband";
  if (runtime().rank() == 0) {
    fs::create_directories(dir);
    TIFF* t = TIFFOpen((dir + "/five.tif").c_str(), "w");
    ASSERT_NE(t, nullptr);
    TIFFSetField(t, TIFFTAG_IMAGEWIDTH, 16);
    TIFFSetField(t, TIFFTAG_IMAGELENGTH, 16);
    TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, 5);
    TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, 16);
    TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
    TIFFSetField(t, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK);
    const uint16_t extra[4] = {EXTRASAMPLE_UNSPECIFIED, EXTRASAMPLE_UNSPECIFIED, EXTRASAMPLE_UNSPECIFIED,
                               EXTRASAMPLE_UNSPECIFIED};
    TIFFSetField(t, TIFFTAG_EXTRASAMPLES, 4, extra);
    std::vector<uint16_t> row(16 * 5);
    for (int x = 0; x < 16; ++x)
      for (int b = 0; b < 5; ++b) row[x * 5 + b] = uint16_t(1000 * (b + 1));
    for (uint32_t y = 0; y < 16; ++y) TIFFWriteScanline(t, row.data(), y, 0);
    TIFFClose(t);
    std::ofstream(dir + "/index.jsonl") << R"({"image": "five.tif", "caption": "five bands"})"
                                        << "\n";
  }
  runtime().barrier();
  data::PrepImageTextOptions o;
  o.images_dir = dir;
  o.captions_file = dir + "/index.jsonl";
  o.size = 16;
  o.vocab_size = 30;
  o.out = dir + "/no_bands.h5";
  EXPECT_NE(message_of([&] { data::prep_image_text(runtime(), o); }).find("5 bands: choose three with --bands"),
            std::string::npos);
  o.bands = {5, 3, 1};
  o.out = dir + "/bands.h5";
  ASSERT_EQ(data::prep_image_text(runtime(), o).written, 1);
  data::DatasetReader reader(o.out, data::IoDriver::POSIX);
  std::vector<uint8_t> image(16 * 16 * 3);
  reader.read_rows({0}, image.data(), nullptr, nullptr, nullptr);
  EXPECT_EQ((std::vector<int>{image[0], image[1], image[2]}), (std::vector<int>{255, 153, 51}));
}

TEST(Format, IncompleteOrForeignFilesAreRefusedWithTheReason) {
  const std::string dir = shared_dir();
  if (runtime().rank() == 0) {
    std::ofstream(dir + "/text.h5") << "hello";
    fs::copy_file(synthetic_file(), dir + "/copy.h5", fs::copy_options::overwrite_existing);
    fs::resize_file(dir + "/copy.h5", fs::file_size(dir + "/copy.h5") / 2);  // truncated
  }
  runtime().barrier();
  EXPECT_EQ(message_of([&] { data::validate_dataset(dir + "/none.h5"); }), dir + "/none.h5: file: does not exist");
  EXPECT_EQ(message_of([&] { data::validate_dataset(dir + "/text.h5"); }), dir + "/text.h5: file: not an HDF5 file");
  EXPECT_NE(message_of([&] { data::validate_dataset(dir + "/copy.h5"); }), "<no UserError>");
  runtime().barrier();
}
