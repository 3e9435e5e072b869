// The checkpoint file's Reader: any process, every read checked against its blocks' checksums.
#include <algorithm>

#include "encoding.h"
#include "meridian/ckpt/file.h"
#include "meridian/ckpt/files.h"
#include "meridian/core/crc32c.h"
#include "meridian/core/error.h"
#include "seal.h"

namespace meridian::ckpt {

using namespace detail;

struct Reader::Impl {
  std::string path;
  h5::Id file;
  std::vector<std::string> names;  // every dataset (ranks/ included), sorted
};

namespace {
herr_t collect(hid_t, const char* name, const H5O_info_t* info, void* out) {
  if (info->type == H5O_TYPE_DATASET) static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}
}  // namespace

bool is_checkpoint(const std::string& path) {
  if (!starts_as_checkpoint(path)) return false;
  check_seal(path);  // a sealed checkpoint that does not match: DataError
  const auto locked = h5::lock();
  h5::QuietErrors quiet;
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return false;
  h5::Id file = h5::file_id(f);
  return h5::read_attr_string(file, "format").value_or("") == "meridian-checkpoint";
}

Reader::Reader(const std::string& path) : impl_(std::make_unique<Impl>()) {
  auto& m = *impl_;
  m.path = path;
  check_seal(path);  // before any HDF5 call: a damaged file must not reach HDF5's parser
  const auto locked = h5::lock();
  h5::QuietErrors quiet;
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) throw DataError(path, "file", "cannot open as HDF5 (missing, truncated or not a checkpoint)");
  m.file = h5::file_id(f);
  try {
    if (h5::read_attr_string(m.file, "format").value_or("") != "meridian-checkpoint")
      throw DataError(path, "attribute 'format'", "not a meridian checkpoint");
    const auto version = h5::read_attr_int(m.file, "format_version");
    if (version != 1)
      throw DataError(
          path, "attribute 'format_version'",
          "unsupported (" + (version ? std::to_string(*version) : std::string("missing")) + "; this build reads 1)");
    if (H5Ovisit(m.file, H5_INDEX_NAME, H5_ITER_INC, collect, &m.names) < 0)
      throw DataError(path, "file", "cannot list its datasets (corrupt?)");
  } catch (...) {
    m.file.reset();  // closed here, under the HDF5 lock
    throw;
  }
  std::sort(m.names.begin(), m.names.end());
}

Reader::~Reader() {
  const auto locked = h5::lock();
  impl_->file.reset();
}

const std::string& Reader::path() const { return impl_->path; }

std::vector<std::string> Reader::names() const {
  std::vector<std::string> out;
  for (const auto& n : impl_->names)
    if (n.rfind("ranks/", 0) != 0) out.push_back(n);
  return out;
}

bool Reader::has(const std::string& name) const {
  return std::binary_search(impl_->names.begin(), impl_->names.end(), name);
}

at::Tensor Reader::read(const std::string& name) const { return read_rows(name, 0, -1); }

// count < 0: the whole tensor (also 0-dim ones).
at::Tensor Reader::read_rows(const std::string& name, int64_t first, int64_t count) const {
  auto& m = *impl_;
  if (!has(name)) throw DataError(m.path, "dataset '" + name + "'", "missing");
  const auto locked = h5::lock();
  h5::QuietErrors quiet;
  const hid_t d = H5Dopen2(m.file, name.c_str(), H5P_DEFAULT);
  if (d < 0) throw DataError(m.path, "dataset '" + name + "'", "cannot open");
  h5::Id dset = h5::dataset_id(d);
  const auto type = scalar_type(h5::read_attr_string(dset, "dtype").value_or("?"), m.path, name);
  const auto dims = h5::dims(dset);
  std::vector<int64_t> shape(dims.begin(), dims.end());
  const int64_t rows = shape.empty() ? 1 : shape[0];
  const bool whole = count < 0;
  if (whole) first = 0, count = rows;
  if (!whole && count == 0 && !shape.empty() && first >= 0 && first <= rows) {
    shape[0] = 0;
    return at::empty(shape, at::TensorOptions().dtype(type));
  }
  if (!whole && (shape.empty() || first < 0 || first + count > rows))
    throw DataError(m.path, "dataset '" + name + "'",
                    "rows [" + std::to_string(first) + ", " + std::to_string(first + count) + ") requested of " +
                        std::to_string(shape.empty() ? 0 : rows));
  const auto crcs = read_u32_array_attr(dset, "crc32c");
  const int64_t block_rows = h5::read_attr_int(dset, "block_rows").value_or(0);
  const int64_t blocks = block_rows > 0 ? (rows + block_rows - 1) / block_rows : -1;
  int64_t numel = 1;
  for (auto s : shape) numel *= s;
  if (numel > 0 && (block_rows < 1 || int64_t(crcs.size()) != blocks))
    throw DataError(m.path, "dataset '" + name + "'", "checksums missing or incomplete (the write did not finish)");
  // The whole checksum blocks that hold the requested rows.
  const int64_t b0 = count > 0 && block_rows > 0 ? first / block_rows : 0;
  const int64_t b1 = count > 0 && block_rows > 0 ? (first + count + block_rows - 1) / block_rows : 0;
  const int64_t lo = b0 * block_rows, hi = std::min(rows, b1 * block_rows);
  if (!shape.empty()) shape[0] = hi - lo;
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(type));
  if (t.numel() > 0) {
    h5::Id file_space = h5::space_id(MERIDIAN_H5_CHECK(H5Dget_space(dset)));
    std::vector<hsize_t> mem_dims(dims);
    if (!mem_dims.empty()) {
      select_rows(file_space, dims, lo, hi - lo);
      mem_dims[0] = hsize_t(hi - lo);
    }
    h5::Id mem_space = create_space(mem_dims);
    if (H5Dread(dset, type_info(type).memory, mem_space, file_space, H5P_DEFAULT, t.data_ptr()) < 0)
      throw DataError(m.path, "dataset '" + name + "'", "read failed (truncated or corrupt file)");
    try {
      files().on_read(m.path, name, t);
    } catch (const std::exception& e) {
      throw DataError(m.path, "dataset '" + name + "'", std::string("read failed: ") + e.what());
    }
  }
  const int64_t row_bytes = hi > lo ? int64_t(t.nbytes()) / (hi - lo) : 0;
  for (int64_t b = b0; b < b1 && numel > 0; ++b) {
    const int64_t a = b * block_rows, e = std::min(rows, a + block_rows);
    if (crc32c(static_cast<const uint8_t*>(t.data_ptr()) + (a - lo) * row_bytes, size_t((e - a) * row_bytes)) !=
        crcs[size_t(b)])
      throw DataError(
          m.path, "dataset '" + name + "'",
          "checksum mismatch in rows " + std::to_string(a) + ".." + std::to_string(e - 1) + " (corrupt file)");
  }
  if (whole || shape.empty()) return t;
  return t.narrow(0, first - lo, count).clone();
}

int Reader::world_size_written() const { return int(int_attribute("world_size").value_or(0)); }

std::optional<int64_t> Reader::int_attribute(const std::string& name) const {
  const auto locked = h5::lock();
  return h5::read_attr_int(impl_->file, name);
}

std::optional<std::string> Reader::string_attribute(const std::string& name) const {
  const auto locked = h5::lock();
  return h5::read_attr_string(impl_->file, name);
}

void Reader::verify() const {
  for (const auto& n : impl_->names) read(n);
}

std::vector<int64_t> Reader::shape(const std::string& name) const {
  if (!has(name)) throw DataError(impl_->path, "dataset '" + name + "'", "missing");
  const auto locked = h5::lock();
  h5::Id dset = h5::dataset_id(MERIDIAN_H5_CHECK(H5Dopen2(impl_->file, name.c_str(), H5P_DEFAULT)));
  const auto dims = h5::dims(dset);
  return std::vector<int64_t>(dims.begin(), dims.end());
}

int64_t Reader::bytes() const {
  const auto locked = h5::lock();
  int64_t total = 0;
  for (const auto& n : impl_->names) {
    h5::Id dset = h5::dataset_id(MERIDIAN_H5_CHECK(H5Dopen2(impl_->file, n.c_str(), H5P_DEFAULT)));
    total += int64_t(H5Dget_storage_size(dset));
  }
  return total;
}

}  // namespace meridian::ckpt
