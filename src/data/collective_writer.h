// Private to data/: writes a dataset file (docs/formats.md) from many ranks.
//
// Phase 1, CollectiveWriter (collective, MPI-IO): fixed-size arrays are created growable along
// their first dimension and every rank writes its rows by hyperslab in collective calls (a rank
// with nothing to write still makes the call, with an empty selection). close() sets each
// dataset's final row count.
// Phase 2, Finisher (rank 0, serial): what parallel HDF5 cannot write collectively (variable-length
// strings), the tokenizer, the root attributes and, last, complete = 1. The file lives under a
// temporary name until the caller renames it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "h5.h"
#include "meridian/comm/runtime.h"

namespace meridian::data {

class Tokenizer;

class CollectiveWriter {
 public:
  // Collective. Creates `path` (truncating it) with the MPI-IO driver.
  CollectiveWriter(const comm::Runtime& runtime, const std::string& path);
  ~CollectiveWriter();  // closes without finishing if close() was not called (the file stays incomplete)

  // Collective: dataset `name` of shape [capacity, row_dims...], `chunk_rows` rows per chunk.
  void create(const std::string& name, hid_t file_type, const std::vector<hsize_t>& row_dims, int64_t capacity,
              hsize_t chunk_rows);
  bool has(const std::string& name) const;  // created here
  // Collective: grows `name` (by a quarter at a time) until it has at least `rows` rows.
  void reserve(const std::string& name, int64_t rows);
  // Collective: rows [first, first + rows) from `data` (row-major, contiguous); rows may be 0.
  void write(const std::string& name, int64_t first, int64_t rows, hid_t mem_type, const void* data);
  // Collective: final row counts of every dataset, then closes the file.
  void close(const std::map<std::string, int64_t>& rows);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

class Finisher {
 public:
  explicit Finisher(const std::string& path);  // rank 0 only, after CollectiveWriter::close
  ~Finisher();
  // A variable-length string dataset of shape `dims` (1-D or 2-D).
  void create_strings(const std::string& name, const std::vector<hsize_t>& dims);
  // Rows [first, first + rows) of a string dataset; values row-major.
  void write_strings(const std::string& name, int64_t first, int64_t rows, const std::vector<std::string>& values);
  // One element of an existing 1-D int64 dataset.
  void write_int64(const std::string& name, int64_t index, int64_t value);
  void write_string_list(const std::string& name, const std::vector<std::string>& values);
  void write_int64_list(const std::string& name, const std::vector<int64_t>& values);  // a new [n] int64 dataset
  void write_tokenizer(const Tokenizer& tokenizer);
  // Image kinds: attributes image_encoding ("raw" | "jpeg"), image_height, image_width.
  void write_image_format(const std::string& encoding, int64_t height, int64_t width);
  // Root attributes, then complete = 1; closes the file.
  void finish(const std::string& kind, const std::string& split, int64_t count);

 private:
  h5::Id file_;
  std::map<std::string, h5::Id> strings_;
};

// Ranks take blocks of `block` consecutive rows round-robin (rank r owns the blocks b with
// b % size == r), one block per rank per round, so the file keeps the input order.
struct BlockRounds {
  int64_t count = 0;  // rows in all
  int block = 1, rank = 0, size = 1;
  int64_t per_round() const { return int64_t(block) * size; }
  int64_t rounds() const { return (count + per_round() - 1) / per_round(); }
  int64_t first(int64_t round) const { return round * per_round() + int64_t(rank) * block; }  // this rank's
  int64_t last(int64_t round) const { return std::min(count, first(round) + block); }         // exclusive
  bool owns(int64_t row) const { return (row / block) % size == rank; }
};

// Variable-length rows (an image's boxes, a document's tokens) stored flat: `columns` hold the
// elements of all rows in row order, `offsets` each row's first element. Used once per round by
// every rank, in the same order: place(), then write() for every column, then write_offsets().
class RaggedColumns {
 public:
  RaggedColumns(const comm::Runtime& runtime, CollectiveWriter& writer, std::vector<std::string> columns,
                std::string offsets);
  // Collective: this round's `elements` go after those of lower ranks (exclusive prefix sum) and of
  // all earlier rounds; every column grows to fit. Returns the index of this rank's first element.
  int64_t place(int64_t elements);
  // Collective: this rank's placed elements of `column` from `data`.
  void write(const std::string& column, hid_t mem_type, const void* data);
  // Collective: rows [first_row, first_row + starts.size()) of `offsets`: each row's first element,
  // given relative to this rank's first placed element.
  void write_offsets(int64_t first_row, std::vector<int64_t> starts);
  int64_t total() const { return total_; }  // elements placed in all rounds so far, on every rank

 private:
  const comm::Runtime& rt_;
  CollectiveWriter& writer_;
  std::vector<std::string> columns_;
  std::string offsets_;
  int64_t total_ = 0, first_ = 0, elements_ = 0;
};

}  // namespace meridian::data
