#include "meridian/data/dataset_reader.h"

#include <algorithm>
#include <functional>
#include <stdexcept>

#include "h5.h"
#include "jpeg.h"
#include "meridian/comm/mpi_interop.h"
#include "meridian/core/error.h"
#include "meridian/core/hash.h"
#include "meridian/data/tokenizer.h"

namespace meridian::data {

IoDriver parse_io_driver(const std::string& name) {
  if (name == "mpio") return IoDriver::MPIO;
  if (name == "posix") return IoDriver::POSIX;
  throw UserError("--io-driver: unknown driver '" + name + "' (expected mpio or posix)");
}

// One file's open datasets (a part of an index, or the file itself).
struct DatasetReader::Handles {
  std::string path;
  int64_t first_row = 0, count = 0;                               // its rows in the dataset's numbering
  h5::Id file, images, tokens, lengths, labels, names, captions;  // image_text: all; detection: file, images, names
  h5::Id image_bytes, image_offsets;                              // jpeg files, instead of images
  h5::Id boxes, box_classes;                                      // detection
  h5::Id image_sizes, image_ids, box_areas;                       // detection, files since 2026-12
  h5::Id crowd_boxes, crowd_classes;                              // detection, COCO's crowd regions
  std::vector<int64_t> crowd_offsets;                             // [N + 1] when the file has crowd regions
  std::vector<int64_t> box_offsets;                               // detection: [N + 1], read once
};

DatasetReader::DatasetReader(const std::string& path, IoDriver driver)
    : DatasetReader(validate_dataset(path), driver) {}

DatasetReader::DatasetReader(const DatasetInfo& info, IoDriver driver) : info_(info), driver_(driver) {
  const auto locked = h5::lock();
  const bool detection = info_.kind == "detection";
  if (info_.kind != "image_text" && !detection)
    throw DataError(info_.path, "attribute 'kind'",
                    "this reader (the image-text and detection loaders) reads 'image_text' "
                    "and 'detection' files, not '" +
                        info_.kind + "'");
  if (jpeg()) codec_ = std::make_unique<JpegCodec>();
  int64_t first_row = 0;
  for (const auto& part : info_.parts) {
    auto h = std::make_unique<Handles>();
    h->path = part.path, h->first_row = first_row, h->count = part.count;
    first_row += part.count;
    h5::Id fapl = h5::plist_id(MERIDIAN_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
    if (driver == IoDriver::MPIO) MERIDIAN_H5_CHECK(H5Pset_fapl_mpio(fapl, MPI_COMM_SELF, MPI_INFO_NULL));
    h->file = h5::file_id(MERIDIAN_H5_CHECK(H5Fopen(part.path.c_str(), H5F_ACC_RDONLY, fapl)));
    const auto open = [&](const char* name, hid_t dapl = H5P_DEFAULT) {
      return h5::dataset_id(MERIDIAN_H5_CHECK(H5Dopen2(h->file, name, dapl)));
    };
    // No chunk cache for the images: each chunk (one image) is read about once per epoch, and
    // through the cache every byte would be copied twice (measured: 32 cached chunk reads 0.62 ms,
    // direct 0.42 ms).
    h5::Id uncached = h5::plist_id(MERIDIAN_H5_CHECK(H5Pcreate(H5P_DATASET_ACCESS)));
    MERIDIAN_H5_CHECK(H5Pset_chunk_cache(uncached, H5D_CHUNK_CACHE_NSLOTS_DEFAULT, 0, H5D_CHUNK_CACHE_W0_DEFAULT));
    if (jpeg()) {
      h->image_bytes = open("/image_bytes", uncached);
      h->image_offsets = open("/image_offsets");
    } else {
      h->images = open("/images", uncached);
    }
    h->names = open("/names");
    if (detection) {
      h->boxes = open("/boxes");
      h->box_classes = open("/box_classes");
      if (info_.original_sizes) h->image_sizes = open("/image_sizes"), h->image_ids = open("/image_ids");
      if (info_.box_areas) h->box_areas = open("/box_areas");
      const auto read_offsets = [&](const char* name, std::vector<int64_t>& out) {  // [N + 1], read once
        out.resize(size_t(part.count + 1));
        MERIDIAN_H5_CHECK(H5Dread(open(name), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()));
      };
      if (info_.crowd_count >= 0) {
        h->crowd_boxes = open("/crowd_boxes");
        h->crowd_classes = open("/crowd_classes");
        read_offsets("/crowd_offsets", h->crowd_offsets);
      }
      read_offsets("/box_offsets", h->box_offsets);
    } else {
      h->tokens = open("/tokens");
      h->lengths = open("/token_lengths");
      h->labels = open("/labels");
      h->captions = open("/captions");
    }
    parts_.push_back(std::move(h));
  }
}

DatasetReader::~DatasetReader() {
  const auto locked = h5::lock();
  parts_.clear();
}

namespace {
// Elements [first, first + n) of a [M, width] dataset (width 1: [M]) into `out` (resized).
template <class T>
void read_elements(hid_t dset, hid_t mem_type, int64_t first, int64_t n, int width, std::vector<T>& out) {
  out.resize(size_t(n * width));
  if (n == 0) return;
  h5::Id space = h5::space_id(MERIDIAN_H5_CHECK(H5Dget_space(dset)));
  const int rank = width == 1 ? 1 : 2;
  hsize_t start[2] = {hsize_t(first), 0}, count[2] = {hsize_t(n), hsize_t(width)};
  MERIDIAN_H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, count, nullptr));
  h5::Id mem = h5::space_id(MERIDIAN_H5_CHECK(H5Screate_simple(rank, count, nullptr)));
  MERIDIAN_H5_CHECK(H5Dread(dset, mem_type, mem, space, H5P_DEFAULT, out.data()));
}

// Reads whole rows `rows` (ascending, unique) of `dset` into a contiguous buffer: one H5Dread per
// run of consecutive rows, each a regular hyperslab.
//
// Why not one H5Dread on the union of the runs: HDF5 1.10 turns a union into an "irregular"
// selection whose iterator walks the innermost dimension (3 bytes of an RGB pixel row) one span at
// a time: 11 ms per 256x256 image against 0.1 ms for a regular hyperslab (measured on the UCM file,
// docs/performance.md).
void read_union(hid_t dset, const std::vector<int64_t>& rows, hid_t mem_type, void* out, bool direct_chunks) {
  if (rows.empty()) return;
  const auto d = h5::dims(dset);
  // Fast path for single rows of /images (one row per chunk, no filters, stored type = memory
  // type): the chunk's bytes are the row, so read them directly (H5Dread_chunk), skipping HDF5's
  // selection machinery. Runs of several rows stay one hyperslab read. HDF5 does not support
  // H5Dread_chunk with the MPI-IO driver: POSIX only.
  bool direct = false;
  size_t row_bytes = H5Tget_size(mem_type);
  for (size_t k = 1; k < d.size(); ++k) row_bytes *= d[k];
  if (direct_chunks) {
    const auto chunk = h5::chunk_dims(dset);
    h5::Id file_type = h5::type_id(MERIDIAN_H5_CHECK(H5Dget_type(dset)));
    h5::Id dcpl = h5::plist_id(MERIDIAN_H5_CHECK(H5Dget_create_plist(dset)));
    direct = !chunk.empty() && chunk[0] == 1 && std::equal(chunk.begin() + 1, chunk.end(), d.begin() + 1) &&
             H5Pget_nfilters(dcpl) == 0 && H5Tequal(file_type, mem_type) > 0;
  }
  h5::Id file_space = h5::space_id(MERIDIAN_H5_CHECK(H5Dget_space(dset)));
  std::vector<hsize_t> off(d.size(), 0), cnt(d);
  size_t i = 0;
  while (i < rows.size()) {
    size_t e = i + 1;
    while (e < rows.size() && rows[e] == rows[e - 1] + 1) ++e;
    off[0] = hsize_t(rows[i]);
    cnt[0] = hsize_t(e - i);
    char* dest = static_cast<char*>(out) + i * row_bytes;
    if (direct && e - i == 1) {
      uint32_t filters = 0;
      MERIDIAN_H5_CHECK(H5Dread_chunk(dset, H5P_DEFAULT, off.data(), &filters, dest));
      i = e;
      continue;
    }
    MERIDIAN_H5_CHECK(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, off.data(), nullptr, cnt.data(), nullptr));
    h5::Id mem_space = h5::space_id(MERIDIAN_H5_CHECK(H5Screate_simple(int(cnt.size()), cnt.data(), nullptr)));
    MERIDIAN_H5_CHECK(H5Dread(dset, mem_type, mem_space, file_space, H5P_DEFAULT, dest));
    i = e;
  }
}
}  // namespace

void DatasetReader::check_rows(const std::vector<int64_t>& rows) const {
  for (size_t i = 0; i < rows.size(); ++i) {
    MERIDIAN_CHECK(rows[i] >= 0 && rows[i] < info_.count, "row out of range");
    MERIDIAN_CHECK(i == 0 || rows[i] > rows[i - 1], "rows must be ascending and unique");
  }
}

void DatasetReader::for_parts(const std::vector<int64_t>& rows,
                              const std::function<void(Handles&, const std::vector<int64_t>&, size_t)>& fn) {
  std::vector<int64_t> local;
  for (size_t i = 0; i < rows.size();) {
    Handles& h = part_of(rows[i]);
    local.clear();
    size_t e = i;
    for (; e < rows.size() && rows[e] < h.first_row + h.count; ++e) local.push_back(rows[e] - h.first_row);
    fn(h, local, i);
    i = e;
  }
}

DatasetReader::Handles& DatasetReader::part_of(int64_t row) {
  const auto it = std::upper_bound(parts_.begin(), parts_.end(), row,
                                   [](int64_t r, const std::unique_ptr<Handles>& h) { return r < h->first_row; });
  MERIDIAN_CHECK(it != parts_.begin(), "row before the first part");
  return **(it - 1);
}

void DatasetReader::read_rows(const std::vector<int64_t>& rows, uint8_t* images, int32_t* tokens, int32_t* lengths,
                              int32_t* labels) {
  const auto locked = h5::lock();
  check_rows(rows);
  if (info_.kind == "detection" && (tokens || lengths || labels))
    throw std::invalid_argument(info_.path + ": a detection file has no tokens, lengths or labels to read");
  if (images && jpeg()) {
    EncodedRows enc;
    read_encoded_locked(rows, enc);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Handles& h = part_of(rows[i]);
      codec_->decode(enc.bytes.data() + enc.starts[i], size_t(enc.starts[i + 1] - enc.starts[i]), int(info_.height),
                     int(info_.width), images + i * image_bytes(), h.path, rows[i] - h.first_row);
    }
    images = nullptr;
  }
  const bool direct = driver_ == IoDriver::POSIX;
  const int64_t K = info_.captions_per_sample, L = info_.context_length;
  for_parts(rows, [&](Handles& h, const std::vector<int64_t>& local, size_t at) {
    if (images) read_union(h.images, local, H5T_NATIVE_UINT8, images + at * image_bytes(), direct);
    if (tokens) read_union(h.tokens, local, H5T_NATIVE_INT32, tokens + at * K * L, direct);
    if (lengths) read_union(h.lengths, local, H5T_NATIVE_INT32, lengths + at * K, direct);
    if (labels) read_union(h.labels, local, H5T_NATIVE_INT32, labels + at, direct);
  });
}

void DatasetReader::read_encoded(const std::vector<int64_t>& rows, EncodedRows& out) {
  const auto locked = h5::lock();
  check_rows(rows);
  read_encoded_locked(rows, out);
}

void DatasetReader::read_encoded_locked(const std::vector<int64_t>& rows, EncodedRows& out) {
  if (!jpeg())
    throw DataError(info_.path, "attribute 'image_encoding'", "'" + info_.image_encoding + "' images are not encoded");
  out.starts.assign(1, 0);
  out.bytes.clear();
  std::vector<int64_t> off;
  for_parts(rows, [&](Handles& h, const std::vector<int64_t>& local, size_t) {
    h5::Id offset_space = h5::space_id(MERIDIAN_H5_CHECK(H5Dget_space(h.image_offsets)));
    h5::Id byte_space = h5::space_id(MERIDIAN_H5_CHECK(H5Dget_space(h.image_bytes)));
    const int64_t part_bytes = int64_t(h5::dims(h.image_bytes).at(0));
    for (size_t i = 0; i < local.size();) {
      size_t e = i + 1;  // a run of consecutive rows: its bytes are one contiguous range
      while (e < local.size() && local[e] == local[e - 1] + 1) ++e;
      hsize_t first = hsize_t(local[i]), n = hsize_t(e - i + 1);
      off.resize(n);
      MERIDIAN_H5_CHECK(H5Sselect_hyperslab(offset_space, H5S_SELECT_SET, &first, nullptr, &n, nullptr));
      h5::Id mem = h5::space_id(MERIDIAN_H5_CHECK(H5Screate_simple(1, &n, nullptr)));
      MERIDIAN_H5_CHECK(H5Dread(h.image_offsets, H5T_NATIVE_INT64, mem, offset_space, H5P_DEFAULT, off.data()));
      for (size_t k = 0; k + 1 < n; ++k)
        if (off[k] < 0 || off[k + 1] <= off[k] || off[k + 1] > part_bytes)
          throw DataError(h.path, "/image_offsets",
                          "row " + std::to_string(local[i] + int64_t(k)) + " has bytes [" + std::to_string(off[k]) +
                              ", " + std::to_string(off[k + 1]) + "), not a range of /image_bytes (" +
                              std::to_string(part_bytes) + " bytes)");
      const size_t at = out.bytes.size();
      hsize_t start = hsize_t(off[0]), count = hsize_t(off[n - 1] - off[0]);
      out.bytes.resize(at + count);
      MERIDIAN_H5_CHECK(H5Sselect_hyperslab(byte_space, H5S_SELECT_SET, &start, nullptr, &count, nullptr));
      h5::Id bytes_mem = h5::space_id(MERIDIAN_H5_CHECK(H5Screate_simple(1, &count, nullptr)));
      MERIDIAN_H5_CHECK(
          H5Dread(h.image_bytes, H5T_NATIVE_UINT8, bytes_mem, byte_space, H5P_DEFAULT, out.bytes.data() + at));
      for (size_t k = 1; k < n; ++k) out.starts.push_back(int64_t(at) + off[k] - off[0]);
      i = e;
    }
  });
}

std::vector<RowBoxes> DatasetReader::read_boxes(const std::vector<int64_t>& rows, bool evaluation) {
  if (info_.kind != "detection")
    throw DataError(info_.path, "attribute 'kind'", "boxes are read from 'detection' files, not '" + info_.kind + "'");
  check_rows(rows);
  std::vector<RowBoxes> out(rows.size());
  const auto locked = h5::lock();
  std::vector<float> boxes, areas, crowd;
  std::vector<int32_t> classes, crowd_classes;
  for_parts(rows, [&](Handles& h, const std::vector<int64_t>& local, size_t at) {
    if (evaluation && info_.original_sizes) {
      std::vector<int32_t> sizes(2 * local.size());
      std::vector<int64_t> ids(local.size());
      read_union(h.image_sizes, local, H5T_NATIVE_INT32, sizes.data(), false);
      read_union(h.image_ids, local, H5T_NATIVE_INT64, ids.data(), false);
      for (size_t k = 0; k < local.size(); ++k)
        out[at + k].original_size = {sizes[2 * k], sizes[2 * k + 1]}, out[at + k].image_id = ids[k];
    }
    // Runs of consecutive rows: their boxes (and crowd regions) are one contiguous range each.
    for (size_t i = 0; i < local.size();) {
      size_t e = i + 1;
      while (e < local.size() && local[e] == local[e - 1] + 1) ++e;
      const auto range = [&](const std::vector<int64_t>& off) {
        return std::pair{off[size_t(local[i])], off[size_t(local[e - 1]) + 1] - off[size_t(local[i])]};
      };
      const auto [first, n] = range(h.box_offsets);
      read_elements(h.boxes, H5T_NATIVE_FLOAT, first, n, 4, boxes);
      read_elements(h.box_classes, H5T_NATIVE_INT32, first, n, 1, classes);
      const bool areas_here = evaluation && info_.box_areas, crowds_here = evaluation && info_.crowd_count >= 0;
      if (areas_here) read_elements(h.box_areas, H5T_NATIVE_FLOAT, first, n, 1, areas);
      int64_t crowd_first = 0;
      if (crowds_here) {
        const auto [cf, cn] = range(h.crowd_offsets);
        crowd_first = cf;
        read_elements(h.crowd_boxes, H5T_NATIVE_FLOAT, cf, cn, 4, crowd);
        read_elements(h.crowd_classes, H5T_NATIVE_INT32, cf, cn, 1, crowd_classes);
      }
      for (size_t k = i; k < e; ++k) {
        RowBoxes& row = out[at + k];
        const size_t a = size_t(h.box_offsets[size_t(local[k])] - first),
                     b = size_t(h.box_offsets[size_t(local[k]) + 1] - first);
        for (size_t j = a; j < b; ++j)
          row.boxes.push_back({boxes[4 * j], boxes[4 * j + 1], boxes[4 * j + 2], boxes[4 * j + 3]});
        row.classes.assign(classes.begin() + long(a), classes.begin() + long(b));
        if (areas_here) row.areas.assign(areas.begin() + long(a), areas.begin() + long(b));
        if (!crowds_here) continue;
        const size_t ca = size_t(h.crowd_offsets[size_t(local[k])] - crowd_first),
                     cb = size_t(h.crowd_offsets[size_t(local[k]) + 1] - crowd_first);
        for (size_t j = ca; j < cb; ++j)
          row.crowd.push_back({crowd[4 * j], crowd[4 * j + 1], crowd[4 * j + 2], crowd[4 * j + 3]});
        row.crowd_classes.assign(crowd_classes.begin() + long(ca), crowd_classes.begin() + long(cb));
      }
      i = e;
    }
  });
  return out;
}

std::string DatasetReader::fingerprint() {
  const auto locked = h5::lock();
  std::string text = std::to_string(info_.file_bytes) + "|" + info_.kind + "|" + info_.created_by + "|" +
                     std::to_string(info_.count) + "|" + std::to_string(info_.height) + "x" +
                     std::to_string(info_.width) + "|" + std::to_string(info_.parts.size());
  if (info_.kind == "detection") text += "|" + std::to_string(info_.box_count);
  std::vector<uint8_t> first;
  if (info_.count > 0 && jpeg()) {
    EncodedRows enc;
    read_encoded_locked({0}, enc);
    first = std::move(enc.bytes);
  } else if (info_.count > 0) {
    first.resize(image_bytes());
    read_union(parts_.front()->images, {0}, H5T_NATIVE_UINT8, first.data(), false);
  }
  const uint64_t h = fnv1a(first.data(), first.size(), fnv1a(text.data(), text.size()));
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", (unsigned long long)h);
  return buf;
}

Tokenizer DatasetReader::tokenizer() {
  if (info_.kind != "image_text")
    throw DataError(info_.path, "attribute 'kind'", "a '" + info_.kind + "' file has no /tokenizer to read here");
  return dataset_tokenizer(info_.path);  // the parts of an index share one tokenizer (validate_dataset)
}

std::vector<std::string> DatasetReader::captions(int64_t row) {
  if (info_.kind != "image_text")
    throw DataError(info_.path, "attribute 'kind'", "a '" + info_.kind + "' file has no captions");
  const auto locked = h5::lock();
  check_rows({row});
  const Handles& h = part_of(row);
  return h5::read_strings(h.captions, row - h.first_row, 1);
}
std::string DatasetReader::name(int64_t row) {
  const auto locked = h5::lock();
  check_rows({row});
  const Handles& h = part_of(row);
  return h5::read_strings(h.names, row - h.first_row, 1).at(0);
}

}  // namespace meridian::data
