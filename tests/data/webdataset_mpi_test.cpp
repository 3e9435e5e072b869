// prep image-text --webdataset: tar shards (written here with libarchive, as img2dataset lays them
// out) become rows; a corrupt image, a sample without caption and a truncated shard are reported
// and skipped, or refused with --strict; shards split into the files of a dataset of many files.
#include <archive.h>
#include <archive_entry.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "data_test.h"
#include "meridian/data/dataset_reader.h"
#include "meridian/data/format.h"
#include "meridian/data/prep.h"
#include "meridian/data/synthetic.h"
#include "mpi_test_main.h"

namespace fs = std::filesystem;
namespace data = meridian::data;
using meridian::test::message_of;
using meridian::test::runtime;
using meridian::test::shared_dir;

namespace {

constexpr int kShards = 4, kPerShard = 5, kShardSize = 48;

void write_tar(const std::string& path, const std::vector<std::pair<std::string, std::string>>& members) {
  archive* a = archive_write_new();
  archive_write_set_format_ustar(a);
  ASSERT_EQ(archive_write_open_filename(a, path.c_str()), ARCHIVE_OK) << path;
  for (const auto& [name, data] : members) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, name.c_str());
    archive_entry_set_size(e, la_int64_t(data.size()));
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_write_header(a, e);
    archive_write_data(a, data.data(), data.size());
    archive_entry_free(e);
  }
  archive_write_close(a);
  archive_write_free(a);
}

std::string jpeg_of(int shard, int i) {
  const auto scene = data::make_synthetic_scene(7, shard * kPerShard + i, kShardSize, 1);
  cv::Mat bgr;
  cv::cvtColor(scene.image, bgr, cv::COLOR_RGB2BGR);
  std::vector<uint8_t> bytes;
  cv::imencode(".jpg", bgr, bytes, {cv::IMWRITE_JPEG_QUALITY, 92});
  return {bytes.begin(), bytes.end()};
}

std::string caption_of(int shard, int i) { return "scene " + std::to_string(i) + " of shard " + std::to_string(shard); }

// Shards 00..03 in `dir` (rank 0 writes, every rank waits): samples "<shard>/<i>" with a JPEG and
// a .txt (even i) or .json caption; shard 1's sample 3 is not an image, shard 2's sample 1 has no
// caption, shard 3 is cut in the middle of sample 2's image. Returns key -> caption of the good ones.
std::map<std::string, std::string> make_shards(const std::string& dir) {
  std::map<std::string, std::string> good;
  if (runtime().rank() == 0) fs::create_directories(dir);
  for (int s = 0; s < kShards; ++s) {
    std::vector<std::pair<std::string, std::string>> members;
    for (int i = 0; i < kPerShard; ++i) {
      const std::string key = "0" + std::to_string(s) + "/" + std::to_string(s * 100 + i);
      members.push_back({key + ".jpg", s == 1 && i == 3 ? std::string("not a jpeg") : jpeg_of(s, i)});
      if (s == 2 && i == 1) continue;
      members.push_back(i % 2 == 0
                            ? std::pair{key + ".txt", caption_of(s, i) + "\n"}
                            : std::pair{key + ".json", "{\"caption\": \"" + caption_of(s, i) + "\", \"url\": 1}"});
      if (!(s == 1 && i == 3) && !(s == 3 && i >= 2))
        good["shard-0" + std::to_string(s) + ".tar/" + key] = caption_of(s, i);
    }
    const std::string path = dir + "/shard-0" + std::to_string(s) + ".tar";
    if (runtime().rank() == 0) {
      write_tar(path, members);
      if (s == 3) {  // cut inside sample 2's image: a header and half its bytes remain
        const uintmax_t two_samples = 2 * (2 * 512 + 512 * ((jpeg_of(3, 0).size() + 511) / 512)) + 4096;
        fs::resize_file(path, std::min<uintmax_t>(fs::file_size(path) - 1024, two_samples + 1024 + 700));
      }
    }
  }
  runtime().barrier();
  return good;
}

data::PrepImageTextOptions options(const std::string& dir, const std::string& out) {
  data::PrepImageTextOptions o;
  o.webdataset = dir + "/shard-{00..03}.tar";
  o.out = dir + "/" + out;
  o.size = kShardSize;
  o.captions_per_image = 1;
  o.context_length = 16;
  o.vocab_size = 60;
  o.block = 2;
  o.overwrite = true;
  return o;
}

}  // namespace

TEST(Webdataset, ShardsBecomeRowsAndBadSamplesAreReportedAndSkipped) {
  const std::string dir = shared_dir() + "/wds";
  const auto good = make_shards(dir);
  auto o = options(dir, "wds.h5");
  o.encode = "jpeg";
  const auto report = data::prep_image_text(runtime(), o);
  EXPECT_EQ(report.written, int64_t(good.size()));
  EXPECT_EQ(report.skipped_count, 3) << "the corrupt image, the missing caption and the truncated shard";
  EXPECT_EQ(report.kept_source_bytes, int64_t(good.size())) << "the members' own JPEG bytes";
  if (runtime().rank() == 0) {
    std::string all;
    for (const auto& s : report.skipped) all += s + "\n";
    EXPECT_NE(all.find("shard-01.tar/01/103.jpg: not a JPEG, PNG, TIFF, BMP, WebP or PNM image"), std::string::npos)
        << all;
    EXPECT_NE(all.find("shard-02.tar/02/201: no caption"), std::string::npos) << all;
    EXPECT_NE(all.find("shard-03.tar"), std::string::npos) << all;
  }

  data::DatasetReader reader(o.out, data::IoDriver::POSIX);
  ASSERT_EQ(reader.info().count, int64_t(good.size()));
  std::map<std::string, std::string> seen;
  std::vector<uint8_t> image(reader.image_bytes());
  for (int64_t row = 0; row < reader.info().count; ++row) {
    const std::string name = reader.name(row);
    const auto caption = reader.captions(row).at(0);
    seen[name.substr(dir.size() + 1)] = caption;
    // The pixels are the member's JPEG decoded.
    const std::string key = name.substr(name.rfind('/') + 1);
    const int s = std::stoi(key) / 100, i = std::stoi(key) % 100;
    const std::string bytes = jpeg_of(s, i);
    cv::Mat rgb;
    cv::cvtColor(cv::imdecode(std::vector<uint8_t>(bytes.begin(), bytes.end()), cv::IMREAD_COLOR), rgb,
                 cv::COLOR_BGR2RGB);
    reader.read_rows({row}, image.data(), nullptr, nullptr, nullptr);
    EXPECT_EQ(0, std::memcmp(image.data(), rgb.data, image.size())) << name;
  }
  EXPECT_EQ(seen, good) << "every good sample once, with its caption (.txt or .json)";

  o.strict = true;
  const std::string m = message_of([&] { data::prep_image_text(runtime(), o); });
  EXPECT_EQ(m.rfind("--strict: " + dir + "/shard-0", 0), 0u) << m;
  runtime().barrier();  // rank 0 removes the temporary file on its way out
  EXPECT_FALSE(fs::exists(o.out + ".tmp"));
}

TEST(Webdataset, ShardsSplitIntoTheFilesOfADatasetOfManyFiles) {
  const std::string dir = shared_dir() + "/wds_many";
  const auto good = make_shards(dir);
  auto o = options(dir, "many.json");
  o.part_size = 3;  // shards per file: 00-02, then 03
  const auto report = data::prep_image_text(runtime(), o);
  EXPECT_EQ(report.files, 2);
  const auto info = data::validate_dataset(o.out);
  EXPECT_EQ(info.count, int64_t(good.size()));
  ASSERT_EQ(info.parts.size(), 2u);
  EXPECT_EQ(info.parts[1].count, 2) << "shard 3 holds two readable samples";

  auto bad = options(dir, "bad.h5");
  bad.webdataset = dir + "/shard-{03..01}.tar";
  EXPECT_EQ(
      message_of([&] { data::prep_image_text(runtime(), bad); }),
      "--webdataset: '" + bad.webdataset + "': the range goes backwards (expected e.g. shards/{00000..00099}.tar)");
  bad.webdataset = dir + "/shard-{00..04}.tar";
  EXPECT_EQ(message_of([&] { data::prep_image_text(runtime(), bad); }),
            "--webdataset: " + dir + "/shard-04.tar does not exist");
  bad.webdataset = dir + "/shard-{0..3}.tar";  // not padded: shard-0.tar ...
  EXPECT_EQ(message_of([&] { data::prep_image_text(runtime(), bad); }),
            "--webdataset: " + dir + "/shard-0.tar does not exist");
}
