// The meridian dataset format (docs/formats.md): one HDF5 file per split, read by every rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace meridian::data {

inline constexpr const char* kFormatName = "meridian-dataset";
inline constexpr int64_t kFormatVersion = 1;

// What `meridian inspect` reports; filled by validate_dataset.
struct DatasetInfo {
  std::string path, kind, created_by, split;
  int64_t format_version = 0;
  int64_t count = 0;                            // samples: images, or documents for text
  int64_t height = 0, width = 0, channels = 0;  // /images [count, H, W, C]
  std::vector<uint64_t> image_chunk;            // chunk shape of /images; empty when contiguous
  int64_t captions_per_sample = 0;              // K of /tokens [count, K, L]
  int64_t context_length = 0;                   // L
  std::vector<uint64_t> token_chunk;            // of /tokens (image_text); empty when contiguous
  int64_t vocab_size = 0;                       // of /tokenizer/model
  int64_t pad_id = 0, eos_id = 0;
  std::vector<std::string> class_names;  // empty when unknown
  int64_t box_count = 0;                 // detection: M of /boxes [M, 4]
  int64_t token_count = 0;               // text: T of /tokens [T] (count = documents)
  uint64_t file_bytes = 0;
};

// Opens `path` read-only on this process (not collective) and checks every rule of the format:
// root attributes, `complete = 1`, dataset shapes, types and mutual consistency. Returns the summary.
// Throws DataError naming the file, the dataset or attribute, and what was expected.
DatasetInfo validate_dataset(const std::string& path);

class Tokenizer;
// Not collective: the tokenizer stored in a dataset of any kind (validated first; DataError naming
// the file otherwise). Include meridian/data/tokenizer.h to use the result.
Tokenizer dataset_tokenizer(const std::string& path);

}  // namespace meridian::data
