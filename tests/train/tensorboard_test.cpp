// TensorBoard event files: CRC32C, the record framing and wire format checked byte by byte, the
// writer -> reader round trip, and every kind of corruption the reader must name.
#include "meridian/train/tensorboard.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "meridian/core/error.h"

namespace fs = std::filesystem;
using meridian::DataError;
using meridian::SystemError;
using meridian::train::crc32c;
using meridian::train::EventWriter;
using meridian::train::masked_crc32c;
using meridian::train::read_scalar_events;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  ASSERT_TRUE(out.good()) << path;
}

uint64_t le(const std::string& bytes, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t(uint8_t(bytes.at(at + i))) << (8 * i);
  return v;
}

std::string le_bytes(uint64_t v, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += char(v >> (8 * i));
  return s;
}

// One TFRecord around `data`, framed here independently of the writer.
std::string frame(const std::string& data) {
  const std::string length = le_bytes(data.size(), 8);
  return length + le_bytes(masked_crc32c(length.data(), 8), 4) + data +
         le_bytes(masked_crc32c(data.data(), data.size()), 4);
}

// Event{wall_time = 1.0, file_version = "brain.Event:2"}, encoded by hand.
std::string file_version_event() {
  return std::string("\x09", 1) + le_bytes(0x3FF0000000000000ull, 8) + "\x1a\x0d" + "brain.Event:2";
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The DataError `read_scalar_events` throws for `path` (fails the test if it does not throw one).
std::string data_error(const std::string& path) {
  try {
    read_scalar_events(path);
  } catch (const DataError& e) {
    return e.what();
  }
  ADD_FAILURE() << path << ": no DataError";
  return "";
}

class EventFile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "meridian_tensorboard_test_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A file with a file_version record and three scalars; returns its path and each record's offset.
  std::string write_three(std::vector<size_t>* offsets) {
    std::string path;
    {
      EventWriter w(dir_ + "/run");
      w.add_scalar("loss", 1, 0.5, 100.0);
      w.add_scalar("loss", 2, 0.25, 101.0);
      w.add_scalar("lr", 2, 1e-3, 102.0);
      path = w.path();
    }
    const std::string bytes = read_bytes(path);
    for (size_t at = 0; at < bytes.size(); at += 12 + le(bytes, at, 8) + 4) offsets->push_back(at);
    EXPECT_EQ(offsets->size(), 4u);
    return path;
  }

  std::string dir_;
};

}  // namespace

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc32c("", 0), 0u);
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending += char(i);
  EXPECT_EQ(crc32c(ascending.data(), ascending.size()), 0x46DD794Eu);
}

TEST(Crc32c, MaskedIsRotatedPlusDelta) {
  EXPECT_EQ(masked_crc32c("", 0), 0xa282ead8u);
  EXPECT_EQ(masked_crc32c("123456789", 9), 0xC78AB0E5u);
}

TEST_F(EventFile, NameAndFirstRecordBytes) {
  const double before = std::floor(now_seconds());
  EventWriter w(dir_ + "/a/b");  // parents are created
  const fs::path path(w.path());
  EXPECT_EQ(path.parent_path(), fs::path(dir_ + "/a/b"));
  const std::string name = path.filename().string();
  const std::string prefix = "events.out.tfevents.";
  ASSERT_EQ(name.rfind(prefix, 0), 0u) << name;
  const std::string host = meridian::process_identity().host.empty() ? "localhost" : meridian::process_identity().host;
  const size_t dot = name.find('.', prefix.size());
  ASSERT_NE(dot, std::string::npos) << name;
  EXPECT_EQ(name.substr(dot + 1), host);
  const double seconds = std::stod(name.substr(prefix.size(), dot - prefix.size()));
  EXPECT_GE(seconds, before);
  EXPECT_LE(seconds, before + 5);

  // The constructor flushed the first record: the file is complete without a flush() here.
  const std::string bytes = read_bytes(w.path());
  ASSERT_GE(bytes.size(), 12u);
  const uint64_t length = le(bytes, 0, 8);
  EXPECT_EQ(le(bytes, 8, 4), masked_crc32c(bytes.data(), 8));
  ASSERT_EQ(length, 24u);  // 1 + 8 (wall_time), 1 + 1 + 13 (file_version)
  ASSERT_EQ(bytes.size(), 12 + length + 4);
  const std::string data = bytes.substr(12, length);
  EXPECT_EQ(le(bytes, 12 + length, 4), masked_crc32c(data.data(), data.size()));
  EXPECT_EQ(data[0], '\x09');  // field 1, fixed64
  double wall_time;
  std::memcpy(&wall_time, data.data() + 1, 8);
  EXPECT_GE(wall_time, before);
  EXPECT_LE(wall_time, seconds + 1);
  EXPECT_EQ(data.substr(9), std::string("\x1a\x0d") + "brain.Event:2");  // field 3, length-delimited
  EXPECT_TRUE(read_scalar_events(w.path()).empty());
}

TEST_F(EventFile, ScalarRecordIsTheEventProtoByteForByte) {
  EventWriter w(dir_);
  const size_t first = read_bytes(w.path()).size();
  w.add_scalar("x", 5, 0.5, 2.0);
  w.flush();
  const std::string value = std::string("\x0a\x01x\x15", 4) + le_bytes(0x3F000000u, 4);  // tag "x", simple_value 0.5f
  const std::string summary = "\x0a" + std::string(1, char(value.size())) + value;       // Summary.value
  const std::string event = "\x09" + le_bytes(0x4000000000000000ull, 8) +                // wall_time 2.0
                            "\x10\x05" + "\x2a" + std::string(1, char(summary.size())) + summary;  // step, summary
  EXPECT_EQ(read_bytes(w.path()).substr(first), frame(event));
}

TEST_F(EventFile, RoundTripIsExact) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const int64_t big = std::numeric_limits<int64_t>::max(), small = std::numeric_limits<int64_t>::min();
  std::string path;
  const double before = now_seconds();
  {
    EventWriter w(dir_);
    path = w.path();
    w.add_scalar("train/loss", 0, 2.302585092994046, 1700000000.125);
    w.add_scalar("train/lr", -3, 1e-4, 1700000001.5);
    w.add_scalar("train/loss", big, 1e30, 1700000002.0);
    w.add_scalar("weird tag with spaces/ünïcode", small, -0.0, 0.0);
    w.add_scalar("nan", 7, nan, 1700000003.0);
    w.add_scalar("now", 8, 3.0);
    w.flush();
    // Flushed records are readable while the writer is still open (TensorBoard reads live files).
    EXPECT_EQ(read_scalar_events(path).size(), 6u);
    w.add_scalar("after_flush", 9, 4.0, 1.0);
  }  // the destructor flushes the last one
  const double after = now_seconds();

  const auto events = read_scalar_events(path);
  ASSERT_EQ(events.size(), 7u);
  EXPECT_EQ(events[0].tag, "train/loss");
  EXPECT_EQ(events[0].step, 0);
  EXPECT_EQ(events[0].value, float(2.302585092994046));
  EXPECT_EQ(events[0].wall_time, 1700000000.125);
  EXPECT_EQ(events[1].tag, "train/lr");
  EXPECT_EQ(events[1].step, -3);
  EXPECT_EQ(events[1].value, float(1e-4));
  EXPECT_EQ(events[1].wall_time, 1700000001.5);
  EXPECT_EQ(events[2].step, big);
  EXPECT_EQ(events[2].value, float(1e30));
  EXPECT_EQ(events[3].tag, "weird tag with spaces/ünïcode");
  EXPECT_EQ(events[3].step, small);
  EXPECT_EQ(events[3].value, 0.0f);
  EXPECT_TRUE(std::signbit(events[3].value));
  EXPECT_EQ(events[3].wall_time, 0.0);
  EXPECT_EQ(events[4].tag, "nan");
  EXPECT_TRUE(std::isnan(events[4].value));
  EXPECT_EQ(events[5].tag, "now");
  EXPECT_EQ(events[5].value, 3.0f);
  EXPECT_GE(events[5].wall_time, before);
  EXPECT_LE(events[5].wall_time, after);
  EXPECT_EQ(events[6].tag, "after_flush");
  EXPECT_EQ(events[6].step, 9);
}

TEST_F(EventFile, FlippedDataByteNamesFileAndRecord) {
  std::vector<size_t> at;
  const std::string path = write_three(&at);
  const std::string good = read_bytes(path);
  ASSERT_EQ(read_scalar_events(path).size(), 3u);

  std::string bytes = good;
  bytes[at[2] + 12 + 3] ^= 0x10;  // inside the third record's data
  write_bytes(path, bytes);
  std::string m = data_error(path);
  EXPECT_NE(m.find(path), std::string::npos) << m;
  EXPECT_NE(m.find("record at byte " + std::to_string(at[2]) + ":"), std::string::npos) << m;
  EXPECT_NE(m.find("data CRC mismatch"), std::string::npos) << m;

  bytes = good;
  bytes[at[1] + 2] ^= 0x01;  // the second record's length
  write_bytes(path, bytes);
  m = data_error(path);
  EXPECT_NE(m.find("record at byte " + std::to_string(at[1]) + ":"), std::string::npos) << m;
  EXPECT_NE(m.find("length CRC mismatch"), std::string::npos) << m;

  bytes = good;
  bytes[at[3] - 1] ^= 0x80;  // the third record's data CRC
  write_bytes(path, bytes);
  m = data_error(path);
  EXPECT_NE(m.find("record at byte " + std::to_string(at[2]) + ":"), std::string::npos) << m;
  EXPECT_NE(m.find("data CRC mismatch"), std::string::npos) << m;
}

TEST_F(EventFile, TruncatedFileIsADataError) {
  std::vector<size_t> at;
  const std::string path = write_three(&at);
  const std::string good = read_bytes(path);

  write_bytes(path, good.substr(0, good.size() - 1));  // last record loses a CRC byte
  std::string m = data_error(path);
  EXPECT_NE(m.find(path + ": record at byte " + std::to_string(at[3]) + ": truncated"), std::string::npos) << m;

  write_bytes(path, good.substr(0, at[3] + 5));  // last record's header cut short
  m = data_error(path);
  EXPECT_NE(m.find("record at byte " + std::to_string(at[3]) + ": truncated header"), std::string::npos) << m;

  write_bytes(path, "");
  m = data_error(path);
  EXPECT_NE(m.find(path + ": record at byte 0: empty file"), std::string::npos) << m;

  write_bytes(path, good.substr(0, at[1]));  // whole records only: fine
  EXPECT_TRUE(read_scalar_events(path).empty());
}

TEST_F(EventFile, MalformedProtobufWithGoodCrcsIsADataError) {
  const std::string path = dir_ + "/events.out.tfevents.0.handmade";
  const std::string first = frame(file_version_event());
  write_bytes(path, first + frame("\x10\x05"));  // an event with a step only: valid, no scalars
  EXPECT_TRUE(read_scalar_events(path).empty());

  const std::vector<std::string> malformed = {
      "\x10\xff",  // varint cut short
      std::string("\x2a\x05"
                  "ab"),               // summary longer than the event
      std::string("\x10\x01\x00", 3),  // tag 0
      std::string("\x02\x00", 2),      // field number 0
      "\x0f",                          // wire type 7
      std::string("\x09\x00\x00", 3),  // double cut short
      std::string("\x2a\x03\x0a\x05"
                  "a"),  // value longer than its summary
      std::string("\x2a\x02\x0a\x05"
                  "\x10\x81\x01\x10\x02"),  // value longer than its summary, rest parses as an event
  };
  for (const auto& data : malformed) {
    write_bytes(path, first + frame(data));
    const std::string m = data_error(path);
    EXPECT_NE(m.find(path + ": record at byte " + std::to_string(first.size()) + ": malformed Event protobuf"),
              std::string::npos)
        << m;
  }
}

TEST_F(EventFile, FirstEventMustBeFileVersion) {
  const std::string path = dir_ + "/events.out.tfevents.0.handmade";
  write_bytes(path, frame("\x10\x05"));
  EXPECT_NE(data_error(path).find(path + ": record at byte 0: the first event is not a file_version"),
            std::string::npos);
  write_bytes(path, frame("\x1a\x03"
                          "abc"));
  EXPECT_NE(data_error(path).find("record at byte 0: the first event is not a file_version"), std::string::npos);
  write_bytes(path, frame("\x1a\x0c"
                          "brain.Event:"));
  EXPECT_TRUE(read_scalar_events(path).empty());
}

TEST_F(EventFile, UnknownFieldsAndNonScalarValuesAreSkipped) {
  const std::string path = dir_ + "/events.out.tfevents.0.handmade";
  // Value{tag "img", image (field 4) {}} and Value{tag "s", node_name (7) "n", simple_value 1.0f}; event field 99.
  const std::string image = std::string(
      "\x0a\x03"
      "img"
      "\x22\x00",
      7);
  const std::string scalar = std::string("\x0a\x01s\x3a\x01n\x15", 7) + le_bytes(0x3F800000u, 4);
  const std::string summary =
      "\x0a" + std::string(1, char(image.size())) + image + "\x0a" + std::string(1, char(scalar.size())) + scalar;
  const std::string event = "\x10\x03\x98\x06\x01\x2a" + std::string(1, char(summary.size())) + summary;
  write_bytes(path, frame(file_version_event()) + frame(event));
  const auto events = read_scalar_events(path);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].tag, "s");
  EXPECT_EQ(events[0].step, 3);
  EXPECT_EQ(events[0].value, 1.0f);
}

TEST_F(EventFile, MissingFileIsADataError) {
  const std::string path = dir_ + "/nothing_here";
  EXPECT_NE(data_error(path).find(path + ": file: cannot open"), std::string::npos);
}

TEST_F(EventFile, DirectoryThatCannotBeCreatedIsASystemError) {
  EXPECT_THROW(EventWriter(""), SystemError);
  write_bytes(dir_ + "/plain_file", "x");
  const std::string dir = dir_ + "/plain_file/sub";
  try {
    EventWriter w(dir);
    FAIL() << "no throw for " << dir;
  } catch (const SystemError& e) {
    EXPECT_NE(std::string(e.what()).find(dir + ": cannot create the TensorBoard directory"), std::string::npos)
        << e.what();
  }
}

TEST_F(EventFile, SecondWriterNeverOverwritesTheFirst) {
  EventWriter a(dir_);
  a.add_scalar("a", 1, 1.0, 1.0);
  a.flush();
  try {
    EventWriter b(dir_);  // same second: the same name, refused; a later second: another file
    EXPECT_NE(b.path(), a.path());
  } catch (const SystemError& e) {
    EXPECT_NE(std::string(e.what()).find(a.path() + ": cannot create the event file"), std::string::npos) << e.what();
  }
  ASSERT_EQ(read_scalar_events(a.path()).size(), 1u);
}
