// Private to data/: the index file of a dataset that spans many files (docs/formats.md, "Datasets
// of many files"). A JSON file NAME.json lists part files NAME-00000.h5, NAME-00001.h5, ... (next to
// it), each a complete dataset file of its own, whose rows follow one another in the listed order.
// prep writes it after every finished part; readers (validate_dataset) accept it wherever a dataset
// file is accepted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace meridian::data {

inline constexpr const char* kIndexFormatName = "meridian-dataset-index";
inline constexpr int64_t kIndexFormatVersion = 1;

struct IndexPart {
  std::string file;          // relative to the index's directory
  int64_t count = 0;         // rows in the part
  std::string source;        // the inputs prep read (captions file, shards, ...)
  int64_t source_count = 0;  // inputs `source` had then (a resume checks they are the same)
  int64_t first_input = 0;   // the inputs [first_input, last_input) of `source` the part holds
  int64_t last_input = 0;    // (rows may be fewer: unreadable inputs are skipped)
};

struct DatasetIndex {
  std::string kind;       // image_text | detection
  bool complete = false;  // false while prep is writing (or was interrupted)
  std::vector<IndexPart> parts;
};

// A path names an index when it ends in ".json".
bool is_index_path(const std::string& path);

// Parses and checks the fields (not the parts' files): DataError naming the path and the field.
DatasetIndex read_index(const std::string& path);

// Writes through <path>.tmp and a rename: a reader sees the old index or the new one.
void write_index(const std::string& path, const DatasetIndex& index);

// The path of a part file (`file` as listed, relative to the index's directory).
std::string part_path(const std::string& index_path, const std::string& file);

// The file name of part k of the index at `index_path`: "<stem>-<k, 5 digits>.h5".
std::string part_file_name(const std::string& index_path, int64_t k);

}  // namespace meridian::data
