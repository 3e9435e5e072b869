// Private to data/: writes an image-text dataset (docs/formats.md) from many ranks.
//
// Phase 1 (collective, MPI-IO): the fixed-size arrays (/images, /tokens, /token_lengths, /labels)
// are created at full capacity and every rank writes its rows by hyperslab in collective calls;
// close() shrinks them to the rows actually written (skipped images leave no gap).
// Phase 2 (rank 0, serial): finish() adds what parallel HDF5 cannot write collectively (variable-
// length strings: /names, /captions, /class_names), the tokenizer, the root attributes and, last,
// complete = 1. The file lives under a temporary name until the caller renames it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "h5.h"
#include "meridian/comm/runtime.h"

namespace meridian::data {

class Tokenizer;

struct ImageTextShape {
  int64_t capacity = 0;  // rows the inputs could give (upper bound of the final count)
  int64_t size = 256;    // H = W
  int64_t channels = 3;
  int64_t captions = 5;  // K
  int64_t context = 64;  // L
};

class ImageTextWriter {
 public:
  // Collective. Creates `path` (truncating it) with the MPI-IO driver.
  ImageTextWriter(const comm::Runtime& runtime, const std::string& path, const ImageTextShape& shape);
  ~ImageTextWriter();  // closes without finishing if close() was not called (the file stays incomplete)

  // Collective: every rank calls it the same number of times; `rows` may be 0. Rows
  // [first, first + rows) get images [rows, H, W, C] uint8, tokens [rows, K, L], lengths [rows, K],
  // labels [rows] (all contiguous, row-major).
  void write_rows(int64_t first, int64_t rows, const uint8_t* images, const int32_t* tokens, const int32_t* lengths,
                  const int32_t* labels);

  // Collective: shrinks the datasets to `count` rows and closes the file.
  void close(int64_t count);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Rank 0 only, after close(): the serial phase. names[i] and captions[i*K + k] for row i; rows are
// given as runs so the caller can stream them from other ranks.
class ImageTextFinisher {
 public:
  ImageTextFinisher(const std::string& path, int64_t count, int64_t captions);
  ~ImageTextFinisher();
  // Rows [first, first + names.size()) ; captions.size() == names.size() * K.
  void write_strings(int64_t first, const std::vector<std::string>& names, const std::vector<std::string>& captions);
  // Writes /class_names (if any), /tokenizer/model and the root attributes, then complete = 1; closes.
  void finish(const Tokenizer& tokenizer, const std::vector<std::string>& class_names, const std::string& split);

 private:
  std::string path_;
  int64_t count_, captions_;
  h5::Id file_, names_, captions_ds_;
};

}  // namespace meridian::data
