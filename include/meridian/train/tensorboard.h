// TensorBoard event files: a writer for scalar summaries and a reader that checks them.
//
// A file is a sequence of TFRecords (uint64 length little endian, uint32 masked CRC32C of those 8
// bytes, the data, uint32 masked CRC32C of the data), each holding one serialized
// tensorflow.Event (tensorflow/core/util/event.proto). The first record is
// Event{wall_time, file_version = "brain.Event:2"}; each add_scalar appends
// Event{wall_time, step, summary = Summary{value = [Value{tag, simple_value}]}}. The protobuf wire
// format is written by hand with libprotobuf's low-level streams (no generated code).
//
// File name: <dir>/events.out.tfevents.<unix seconds>.<hostname>, as TensorFlow names them, so
// `tensorboard --logdir <dir>` finds it. The file is created exclusively, never overwriting
// another: a second writer started in the same directory in the same second gets the suffix .1
// (.2, ...).
//
// Not collective and not thread-safe: one process writes one file. In the trainer only rank 0
// creates an EventWriter (the losses it logs are already averaged over ranks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "meridian/core/crc32c.h"

namespace meridian::train {

using meridian::crc32c;  // core/crc32c.h
// The TFRecord checksum: the CRC rotated right by 15 bits plus 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t n);

class EventWriter {
 public:
  // Creates `dir` (and its parents) if needed and the event file with its file_version record.
  // Throws SystemError naming the path if either cannot be created.
  explicit EventWriter(const std::string& dir);
  ~EventWriter();  // flushes and closes; errors there are lost: call flush() to see them
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // One scalar at `step` (stored as a float, as TensorBoard's simple_value is). wall_time is in
  // seconds since the Unix epoch; the first overload uses now. Records are buffered until flush().
  void add_scalar(const std::string& tag, int64_t step, double value);
  void add_scalar(const std::string& tag, int64_t step, double value, double wall_time);
  // Writes the buffered records to the file (TensorBoard then sees them). Throws SystemError.
  void flush();

  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);

  std::string path_;
  std::FILE* file_ = nullptr;
};

struct ScalarEvent {
  double wall_time;
  int64_t step;
  std::string tag;
  float value;
};

// Every simple_value scalar of an event file, in file order (values of other kinds are skipped).
// Checks every record's framing and CRCs and that the first event is a file_version
// "brain.Event:...". A missing file, a truncated or corrupt record or malformed protobuf throws
// DataError naming the file and the byte offset of the bad record.
std::vector<ScalarEvent> read_scalar_events(const std::string& path);

}  // namespace meridian::train
