// The meridian dataset format (docs/formats.md): one HDF5 file per split, read by every rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace meridian::data {

inline constexpr const char* kFormatName = "meridian-dataset";
inline constexpr int64_t kFormatVersion = 2;  // written; versions 1 (raw images only) and 2 are read

// What `meridian inspect` reports; filled by validate_dataset.
struct DatasetInfo {
  std::string path, kind, created_by, split;
  int64_t format_version = 0;
  int64_t count = 0;                            // samples: images, or documents for text
  std::string image_encoding;                   // image kinds: "raw" (/images) or "jpeg" (/image_bytes)
  int64_t height = 0, width = 0, channels = 0;  // of every image: /images [count, H, W, C], or the JPEGs' size
  std::vector<uint64_t> image_chunk;            // chunk shape of /images or /image_bytes; empty when contiguous
  int64_t encoded_bytes = 0;                    // jpeg: bytes of /image_bytes (all images)
  int64_t captions_per_sample = 0;              // K of /tokens [count, K, L]
  int64_t context_length = 0;                   // L
  std::vector<uint64_t> token_chunk;            // of /tokens (image_text); empty when contiguous
  int64_t vocab_size = 0;                       // of /tokenizer/model
  int64_t pad_id = 0, eos_id = 0;
  std::vector<std::string> class_names;  // empty when unknown
  int64_t box_count = 0;                 // detection: M of /boxes [M, 4]
  bool original_sizes = false;           // detection: /image_sizes (and /image_ids) present
  bool box_areas = false;                // detection: /box_areas present
  int64_t crowd_count = -1;              // detection: K of /crowd_boxes [K, 4]; -1: the file has none
  std::vector<int64_t> class_ids;        // detection from COCO: /class_ids, each class's category id
  int64_t token_count = 0;               // text: T of /tokens [T] (count = documents)
  uint64_t file_bytes = 0;               // all files (an index and its parts)
  uint64_t tokenizer_hash = 0;           // FNV-1a of /tokenizer/model (parts of an index must agree)
  // The files that hold the rows, in row order: the file itself, or an index's parts (path, rows).
  struct Part {
    std::string path;
    int64_t count = 0;
  };
  std::vector<Part> parts;
};

// Opens `path` read-only on this process (not collective) and checks every rule of the format:
// root attributes, `complete = 1`, dataset shapes, types and mutual consistency. Returns the summary.
// Throws DataError naming the file, the dataset or attribute, and what was expected.
// A path ending in ".json" is the index of a dataset of many files (image kinds): every part is
// checked, and they must agree (kind, image size and encoding, captions, tokenizer, classes); the
// summary is of all parts together, its rows those of the parts one after another.
DatasetInfo validate_dataset(const std::string& path);

// The words a class name stands for in captions and prompts: '_' and '-' separate words, and so does
// CamelCase ("BareLand" -> "bare land", "dense_residential" -> "dense residential", "HTTPServer" ->
// "HTTP server"); a word all in capitals stays so ("RSICD"), the others are lower case. Not collective.
std::string class_words(const std::string& name);

class Tokenizer;
// Not collective: the tokenizer stored in a dataset of any kind (validated first; DataError naming
// the file otherwise). Include meridian/data/tokenizer.h to use the result.
Tokenizer dataset_tokenizer(const std::string& path);

}  // namespace meridian::data
