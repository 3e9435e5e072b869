// Reading an image-text dataset on one process (no collectives): the loader's I/O thread, `inspect`
// and `bench io` use it. HDF5 is not thread-safe in this build: use one reader from one thread.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "meridian/data/format.h"

namespace meridian::data {

class Tokenizer;

enum class IoDriver { MPIO, POSIX };  // MPI-IO on MPI_COMM_SELF (independent reads), or the POSIX (sec2) driver
IoDriver parse_io_driver(const std::string& name);  // "mpio" | "posix"; UserError otherwise

class DatasetReader {
 public:
  // Validates the file (validate_dataset: DataError on any mismatch) and opens it read-only.
  // Reads `image_text` files (DataError for another kind). MPIO needs MPI initialised.
  DatasetReader(const std::string& path, IoDriver driver);
  // The same for a file validate_dataset has already checked (`info` from it): no second check.
  DatasetReader(const DatasetInfo& info, IoDriver driver);
  ~DatasetReader();
  DatasetReader(const DatasetReader&) = delete;
  DatasetReader& operator=(const DatasetReader&) = delete;

  const DatasetInfo& info() const { return info_; }
  size_t image_bytes() const { return size_t(info_.height) * info_.width * info_.channels; }

  // Rows in ascending order without duplicates. One H5Dread per run of consecutive rows (a regular
  // hyperslab; HDF5 1.10 reads a union of hyperslabs 100x slower, see dataset_reader.cpp). Buffers: images [rows, H, W, C], tokens [rows, K, L], lengths [rows, K], labels [rows];
  // a null pointer skips that dataset.
  void read_rows(const std::vector<int64_t>& rows, uint8_t* images, int32_t* tokens, int32_t* lengths,
                 int32_t* labels);

  // Hash of the file size, the root attributes and the first image chunk: equal on every rank that
  // sees the same file.
  std::string fingerprint();
  Tokenizer tokenizer();
  std::vector<std::string> captions(int64_t row);  // the K raw captions of a row
  std::string name(int64_t row);

 private:
  struct Handles;
  DatasetInfo info_;
  IoDriver driver_;
  std::unique_ptr<Handles> h_;
};

// The boxes of one row of a `detection` file (serial): x_min, y_min, x_max, y_max in stored pixels.
// `info` from validate_dataset (validated once, not per row).
struct RowBoxes {
  std::vector<std::array<float, 4>> boxes;
  std::vector<int32_t> classes;
};
RowBoxes read_boxes(const DatasetInfo& info, int64_t row);

// For `inspect`: class histogram and a few decoded captions (serial), for any kind; `info` from
// validate_dataset.
struct DatasetSummary {
  std::vector<int64_t> class_counts;  // per class_names entry: images (image_text) or boxes (detection)
  int64_t unlabelled = 0;             // image_text: images without a class; detection: images without boxes
  double supervised_fraction = 0;     // text: share of tokens with loss_mask = 1
  struct Example {
    std::string name, caption, decoded;  // stored caption and its tokens decoded; text: prompt and response decoded
  };
  std::vector<Example> examples;
};
DatasetSummary summarize(const DatasetInfo& info, int examples);

}  // namespace meridian::data
