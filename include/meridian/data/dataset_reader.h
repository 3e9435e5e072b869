// Reading an image-text or detection dataset on one process (no collectives): the loaders' I/O
// threads, `inspect` and `bench io` use it. A dataset of many files (an index, format.h) reads as
// one: rows are numbered across its parts in order, and a read that spans parts reads each. HDF5 is not thread-safe in
// this build: use one reader from one thread (every call holds the process-wide HDF5 lock, so readers on other threads
// only wait).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "meridian/data/format.h"

namespace meridian::comm {
class Runtime;
}

namespace meridian::data {

class Tokenizer;
class JpegCodec;

// The boxes of one image of a `detection` file: x_min, y_min, x_max, y_max in stored pixels (pixel
// edges), and their classes (index into class_names).
struct RowBoxes {
  std::vector<std::array<float, 4>> boxes;
  std::vector<int32_t> classes;
  std::vector<float> areas;                 // per box its area in original pixels (COCO's 'area'); empty: not recorded
  std::vector<std::array<float, 4>> crowd;  // COCO's iscrowd regions in stored pixels (not instances)
  std::vector<int32_t> crowd_classes;
  std::array<int32_t, 2> original_size{0, 0};  // width, height before letterboxing; 0: not recorded (older files)
  int64_t image_id = -1;                       // COCO's image id; -1: none
};

// The stored bytes of some rows of a jpeg file: row i's JPEG is bytes [starts[i], starts[i + 1]).
struct EncodedRows {
  std::vector<uint8_t> bytes;
  std::vector<int64_t> starts;  // rows + 1 entries
};

enum class IoDriver { MPIO, POSIX };  // MPI-IO on MPI_COMM_SELF (independent reads), or the POSIX (sec2) driver
IoDriver parse_io_driver(const std::string& name);  // "mpio" | "posix"; UserError otherwise

class DatasetReader {
 public:
  // Validates the file (validate_dataset: DataError on any mismatch) and opens it read-only.
  // Reads `image_text` and `detection` files (DataError for another kind, naming it). A detection
  // file's /box_offsets (8 bytes per image) are read once here. MPIO needs MPI initialised.
  DatasetReader(const std::string& path, IoDriver driver);
  // The same for a file validate_dataset has already checked (`info` from it): no second check.
  DatasetReader(const DatasetInfo& info, IoDriver driver);
  ~DatasetReader();
  DatasetReader(const DatasetReader&) = delete;
  DatasetReader& operator=(const DatasetReader&) = delete;

  const DatasetInfo& info() const { return info_; }
  size_t image_bytes() const { return size_t(info_.height) * info_.width * info_.channels; }  // decoded
  bool jpeg() const { return info_.image_encoding == "jpeg"; }

  // Rows in ascending order without duplicates. One H5Dread per run of consecutive rows (a regular
  // hyperslab; HDF5 1.10 reads a union of hyperslabs 100x slower, see dataset_reader.cpp). Buffers:
  // images [rows, H, W, C], tokens [rows, K, L], lengths [rows, K], labels [rows]; a null pointer
  // skips that dataset. Detection files have images only: tokens, lengths and labels must be null
  // (std::invalid_argument). Rows out of range or not ascending: std::logic_error (MERIDIAN_CHECK).
  // The images of a jpeg file are read and decoded here, one after another (the loaders instead
  // read with read_encoded and decode on their threads).
  void read_rows(const std::vector<int64_t>& rows, uint8_t* images, int32_t* tokens, int32_t* lengths, int32_t* labels);

  // jpeg files: the stored bytes of `rows` (ascending, unique; as read_rows): per run of consecutive
  // rows one read of /image_offsets and one of /image_bytes. Offsets that decrease or leave the
  // column are a DataError naming the file and row.
  void read_encoded(const std::vector<int64_t>& rows, EncodedRows& out);

  // Detection files: the boxes and classes of `rows` (ascending, unique; as read_rows), one entry
  // per row in that order. The boxes of consecutive rows are contiguous in /boxes, so it reads one
  // hyperslab of /boxes and one of /box_classes per run of consecutive rows that has boxes, placed
  // by the offsets read at construction. DataError (naming the file) for an image_text file.
  // `evaluation`: also the original sizes, image ids, areas and crowd regions (files that have them);
  // training reads boxes and classes only.
  std::vector<RowBoxes> read_boxes(const std::vector<int64_t>& rows, bool evaluation = false);

  // Hash of the file size, the root attributes (and the box count of a detection file) and the first
  // image: equal on every rank that sees the same file.
  std::string fingerprint();
  Tokenizer tokenizer();                           // image_text only (DataError otherwise)
  std::vector<std::string> captions(int64_t row);  // the K raw captions of a row; image_text only
  std::string name(int64_t row);                   // the stored image path of a row

 private:
  struct Handles;
  void check_rows(const std::vector<int64_t>& rows) const;  // in range, ascending, unique (std::logic_error)
  Handles& part_of(int64_t row);
  // fn(part, rows of that part numbered within it, index in `rows` of the first) per part, in order.
  void for_parts(const std::vector<int64_t>& rows,
                 const std::function<void(Handles&, const std::vector<int64_t>&, size_t)>& fn);
  void read_encoded_locked(const std::vector<int64_t>& rows, EncodedRows& out);  // with the HDF5 lock held
  DatasetInfo info_;
  IoDriver driver_;
  std::vector<std::unique_ptr<Handles>> parts_;  // info_.parts, opened
  std::unique_ptr<JpegCodec> codec_;             // jpeg: read_rows' decoder
};

// Collective over the runtime's world (the loaders' constructors): every rank validates and opens
// `path` with `driver`; a file of another kind than `kind` is a DataError "<path>: attribute 'kind':
// <reader> reads '<kind>' files, not '<its kind>'" (`reader` e.g. "the detection loader"). All ranks
// agree on success first: one rank's error (any UserError) is thrown on every rank, prefixed
// "rank r: " on the others. Then they compare fingerprints: a rank that sees different content is a
// UserError on every rank naming that rank, rank 0 and their hosts. Returns this rank's reader.
std::unique_ptr<DatasetReader> open_on_every_rank(const comm::Runtime& runtime, const std::string& path,
                                                  IoDriver driver, const std::string& kind, const std::string& reader);

// For `inspect` (dataset_summary.cpp): class histogram and a few decoded captions (serial), for any
// kind; `info` from validate_dataset.
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
