#include "meridian/train/tensorboard.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>
#include <utility>

#include "meridian/core/clock.h"
#include "meridian/core/error.h"

namespace meridian::train {

namespace {

using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;
using WFL = google::protobuf::internal::WireFormatLite;

constexpr size_t kHeaderBytes = 12;  // uint64 length + uint32 masked CRC of the length
constexpr size_t kFooterBytes = 4;   // uint32 masked CRC of the data
constexpr const char* kFileVersion = "brain.Event:2";
constexpr const char* kFileVersionPrefix = "brain.Event:";

void store_le(char* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = char(v >> (8 * i));
}
uint64_t load_le(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(uint8_t(p[i])) << (8 * i);
  return v;
}

[[noreturn]] void throw_io_error(const std::string& path, const std::string& what, int err) {
  throw SystemError(where() + " " + path + ": " + what + ": " + std::strerror(err));
}

// The protobuf bytes `write_fields` produces.
template <class F>
std::string encode(F&& write_fields) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    CodedOutputStream out(&stream);
    write_fields(out);
  }  // the CodedOutputStream trims `bytes` to what was written when it goes
  return bytes;
}

// Reads fields up to the stream's current limit; `on_field(number, wire_type, tag)` consumes each
// one (skipping those it does not know) and returns false if it cannot. False unless the message
// ends exactly at the limit.
template <class F>
bool parse_fields(CodedInputStream& in, F&& on_field) {
  for (uint32_t tag; (tag = in.ReadTag()) != 0;) {
    const int field = WFL::GetTagFieldNumber(tag);
    if (field == 0 || !on_field(field, WFL::GetTagWireType(tag), tag)) return false;
  }
  return in.ConsumedEntireMessage() && in.BytesUntilLimit() == 0;
}

// A length-delimited submessage, parsed by `parse_body` within its limit (which must lie within
// the enclosing one: PushLimit would silently clamp it).
template <class F>
bool parse_submessage(CodedInputStream& in, F&& parse_body) {
  uint32_t length = 0;
  if (!in.ReadVarint32(&length) || length > uint32_t(in.BytesUntilLimit())) return false;
  const auto limit = in.PushLimit(int(length));
  const bool ok = parse_body();
  in.PopLimit(limit);
  return ok;
}

struct ParsedEvent {
  double wall_time = 0;
  int64_t step = 0;
  bool has_file_version = false;  // `what` is a oneof: file_version or summary
  std::string file_version;
  std::vector<std::pair<std::string, float>> scalars;  // the summary's simple_value values
};

// Summary.Value { string tag = 1; float simple_value = 2; ... }: appends (tag, value) if it is a scalar.
bool parse_value(CodedInputStream& in, ParsedEvent& event) {
  std::string tag;
  float value = 0;
  bool is_scalar = false;
  const bool ok = parse_fields(in, [&](int field, WFL::WireType type, uint32_t raw_tag) {
    if (field == 1 && type == WFL::WIRETYPE_LENGTH_DELIMITED) return WFL::ReadString(&in, &tag);
    if (field == 2 && type == WFL::WIRETYPE_FIXED32) {
      uint32_t bits = 0;
      if (!in.ReadLittleEndian32(&bits)) return false;
      value = WFL::DecodeFloat(bits);
      is_scalar = true;
      return true;
    }
    return WFL::SkipField(&in, raw_tag);
  });
  if (ok && is_scalar) event.scalars.emplace_back(std::move(tag), value);
  return ok;
}

// Event { double wall_time = 1; int64 step = 2; oneof what { string file_version = 3; Summary summary = 5; } }
// Summary { repeated Value value = 1; }
bool parse_event(const char* data, int size, ParsedEvent& event) {
  CodedInputStream in(reinterpret_cast<const uint8_t*>(data), size);
  in.PushLimit(size);
  return parse_fields(in, [&](int field, WFL::WireType type, uint32_t raw_tag) {
    if (field == 1 && type == WFL::WIRETYPE_FIXED64) {
      uint64_t bits = 0;
      if (!in.ReadLittleEndian64(&bits)) return false;
      event.wall_time = WFL::DecodeDouble(bits);
      return true;
    }
    if (field == 2 && type == WFL::WIRETYPE_VARINT) {
      uint64_t v = 0;
      if (!in.ReadVarint64(&v)) return false;
      event.step = int64_t(v);
      return true;
    }
    if (field == 3 && type == WFL::WIRETYPE_LENGTH_DELIMITED) {
      event.has_file_version = true;
      event.scalars.clear();
      return WFL::ReadString(&in, &event.file_version);
    }
    if (field == 5 && type == WFL::WIRETYPE_LENGTH_DELIMITED) {
      event.has_file_version = false;
      return parse_submessage(in, [&] {
        return parse_fields(in, [&](int f, WFL::WireType t, uint32_t raw) {
          if (f == 1 && t == WFL::WIRETYPE_LENGTH_DELIMITED)
            return parse_submessage(in, [&] { return parse_value(in, event); });
          return WFL::SkipField(&in, raw);
        });
      });
    }
    return WFL::SkipField(&in, raw_tag);
  });
}

std::string read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw DataError(path, "file", std::string("cannot open: ") + std::strerror(errno));
  std::string bytes;
  char buf[1 << 16];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) bytes.append(buf, n);
  const int err = std::ferror(f) ? errno : 0;
  std::fclose(f);
  if (err) throw_io_error(path, "cannot read the event file", err);
  return bytes;
}

}  // namespace

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t crc = crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

EventWriter::EventWriter(const std::string& dir) {
  MERIDIAN_CHECK(!dir.empty(), "EventWriter: empty directory path");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw SystemError(where() + " " + dir + ": cannot create the TensorBoard directory: " + ec.message());
  const std::string host = process_identity().host.empty() ? "localhost" : process_identity().host;
  const double wall_time = unix_seconds();
  const std::string base =
      (std::filesystem::path(dir) / ("events.out.tfevents." + std::to_string(int64_t(wall_time)) + "." + host))
          .string();
  // x: never overwrite another writer's file. A writer started in the same second (a run resumed
  // at once in the same directory) takes the next free suffix: TensorBoard reads every
  // events.out.tfevents.* file.
  for (int k = 0; !file_ && k < 1000; ++k) {
    path_ = k == 0 ? base : base + "." + std::to_string(k);
    file_ = std::fopen(path_.c_str(), "wbx");
    if (!file_ && errno != EEXIST) break;
  }
  if (!file_) throw_io_error(path_, "cannot create the event file", errno);
  try {
    write_record(encode([&](CodedOutputStream& out) {
      WFL::WriteDouble(1, wall_time, &out);
      WFL::WriteString(3, kFileVersion, &out);
    }));
    flush();
  } catch (...) {
    std::fclose(file_);
    throw;
  }
}

EventWriter::~EventWriter() {
  if (file_) std::fclose(file_);
}

void EventWriter::add_scalar(const std::string& tag, int64_t step, double value) {
  add_scalar(tag, step, value, unix_seconds());
}

void EventWriter::add_scalar(const std::string& tag, int64_t step, double value, double wall_time) {
  const std::string summary_value = encode([&](CodedOutputStream& out) {
    WFL::WriteString(1, tag, &out);
    WFL::WriteFloat(2, float(value), &out);
  });
  const std::string summary = encode([&](CodedOutputStream& out) { WFL::WriteBytes(1, summary_value, &out); });
  write_record(encode([&](CodedOutputStream& out) {
    WFL::WriteDouble(1, wall_time, &out);
    WFL::WriteInt64(2, step, &out);
    WFL::WriteBytes(5, summary, &out);
  }));
}

void EventWriter::flush() {
  if (std::fflush(file_) != 0) throw_io_error(path_, "cannot write the event file", errno);
}

void EventWriter::write_record(const std::string& data) {
  std::string record(kHeaderBytes + data.size() + kFooterBytes, '\0');
  store_le(&record[0], data.size(), 8);
  store_le(&record[8], masked_crc32c(&record[0], 8), 4);
  std::memcpy(&record[kHeaderBytes], data.data(), data.size());
  store_le(&record[kHeaderBytes + data.size()], masked_crc32c(data.data(), data.size()), 4);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size())
    throw_io_error(path_, "cannot write the event file", errno);
}

std::vector<ScalarEvent> read_scalar_events(const std::string& path) {
  const std::string bytes = read_file(path);
  if (bytes.empty()) throw DataError(path, "record at byte 0", "empty file: expected a file_version event");
  std::vector<ScalarEvent> scalars;
  for (size_t offset = 0; offset < bytes.size();) {
    const auto bad = [&](const std::string& problem) {
      return DataError(path, "record at byte " + std::to_string(offset), problem);
    };
    const char* record = bytes.data() + offset;
    const size_t left = bytes.size() - offset;
    if (left < kHeaderBytes) throw bad("truncated header (" + std::to_string(left) + " of 12 bytes)");
    if (load_le(record + 8, 4) != masked_crc32c(record, 8)) throw bad("length CRC mismatch");
    const uint64_t length = load_le(record, 8);
    if (left < kHeaderBytes + kFooterBytes || length > left - kHeaderBytes - kFooterBytes)
      throw bad("truncated: " + std::to_string(length) + " data bytes + CRC expected, " +
                std::to_string(left - kHeaderBytes) + " bytes left");
    const char* data = record + kHeaderBytes;
    if (load_le(data + length, 4) != masked_crc32c(data, length)) throw bad("data CRC mismatch");
    ParsedEvent event;
    if (length > uint64_t(INT_MAX) || !parse_event(data, int(length), event)) throw bad("malformed Event protobuf");
    if (offset == 0 && !(event.has_file_version && event.file_version.rfind(kFileVersionPrefix, 0) == 0))
      throw bad("the first event is not a file_version \"brain.Event:...\"");
    for (auto& [tag, value] : event.scalars) scalars.push_back({event.wall_time, event.step, std::move(tag), value});
    offset += kHeaderBytes + length + kFooterBytes;
  }
  return scalars;
}

}  // namespace meridian::train
