#include "meridian/ckpt/file.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>

#include "h5.h"  // src/h5/h5.h: the HDF5 RAII layer and its process-wide lock
#include "meridian/ckpt/files.h"
#include "meridian/comm/agree.h"
#include "meridian/comm/mpi_interop.h"
#include "meridian/comm/runtime.h"
#include "meridian/comm/watchdog.h"
#include "meridian/core/crc32c.h"
#include "meridian/core/error.h"

namespace meridian::ckpt {

namespace {

constexpr size_t kBlockBytes = 4 << 20;  // rows per checksum block: about this many bytes

struct TypeInfo {
  const char* name;
  hid_t file, memory;
};

TypeInfo type_info(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return {"float32", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT};
    case at::kDouble:
      return {"float64", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE};
    case at::kLong:
      return {"int64", H5T_STD_I64LE, H5T_NATIVE_INT64};
    case at::kInt:
      return {"int32", H5T_STD_I32LE, H5T_NATIVE_INT32};
    case at::kByte:
      return {"uint8", H5T_STD_U8LE, H5T_NATIVE_UINT8};
    case at::kBFloat16:
      return {"bfloat16", H5T_STD_U16LE, H5T_NATIVE_UINT16};
    case at::kHalf:
      return {"float16", H5T_STD_U16LE, H5T_NATIVE_UINT16};
    default:
      throw std::invalid_argument(std::string("checkpoint: unsupported dtype ") + c10::toString(t));
  }
}

at::ScalarType scalar_type(const std::string& name, const std::string& file, const std::string& dataset) {
  for (auto t : {at::kFloat, at::kDouble, at::kLong, at::kInt, at::kByte, at::kBFloat16, at::kHalf})
    if (name == type_info(t).name) return t;
  throw DataError(file, dataset, "unknown dtype '" + name + "'");
}

// Rows of a tensor as the file stores them: dimension 0, or one row for a 0-dim tensor.
int64_t rows_of(const at::Tensor& t) { return t.dim() == 0 ? 1 : t.size(0); }

int64_t block_rows_for(const at::Tensor& t) {
  const int64_t rows = rows_of(t);
  const int64_t row_bytes = rows > 0 ? std::max<int64_t>(1, int64_t(t.nbytes()) / rows) : 1;
  return std::max<int64_t>(1, int64_t(kBlockBytes) / row_bytes);
}

std::vector<hsize_t> shape_of(const at::Tensor& t) {
  std::vector<hsize_t> d;
  for (auto s : t.sizes()) d.push_back(hsize_t(s));
  return d;
}

h5::Id create_space(const std::vector<hsize_t>& dims) {
  if (dims.empty()) return h5::space_id(MERIDIAN_H5_CHECK(H5Screate(H5S_SCALAR)));
  return h5::space_id(MERIDIAN_H5_CHECK(H5Screate_simple(int(dims.size()), dims.data(), nullptr)));
}

// Selects rows [first, first + count) of `space` (all of a scalar space when count > 0).
void select_rows(hid_t space, const std::vector<hsize_t>& dims, int64_t first, int64_t count) {
  if (count <= 0) {
    MERIDIAN_H5_CHECK(H5Sselect_none(space));
    return;
  }
  if (dims.empty()) {
    MERIDIAN_H5_CHECK(H5Sselect_all(space));
    return;
  }
  std::vector<hsize_t> off(dims.size(), 0), cnt(dims);
  off[0] = hsize_t(first);
  cnt[0] = hsize_t(count);
  MERIDIAN_H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_SET, off.data(), nullptr, cnt.data(), nullptr));
}

void write_u32_array_attr(hid_t obj, const std::string& name, const std::vector<uint32_t>& values) {
  const hsize_t n = values.size();
  h5::Id space = h5::space_id(MERIDIAN_H5_CHECK(H5Screate_simple(1, &n, nullptr)));
  h5::Id attr =
      h5::attr_id(MERIDIAN_H5_CHECK(H5Acreate2(obj, name.c_str(), H5T_STD_U32LE, space, H5P_DEFAULT, H5P_DEFAULT)));
  if (n) MERIDIAN_H5_CHECK(H5Awrite(attr, H5T_NATIVE_UINT32, values.data()));
}

std::vector<uint32_t> read_u32_array_attr(hid_t obj, const std::string& name) {
  if (H5Aexists(obj, name.c_str()) <= 0) return {};
  h5::Id attr = h5::attr_id(MERIDIAN_H5_CHECK(H5Aopen(obj, name.c_str(), H5P_DEFAULT)));
  h5::Id space = h5::space_id(MERIDIAN_H5_CHECK(H5Aget_space(attr)));
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  std::vector<uint32_t> values(size_t(std::max<hssize_t>(0, n)));
  if (!values.empty()) MERIDIAN_H5_CHECK(H5Aread(attr, H5T_NATIVE_UINT32, values.data()));
  return values;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
struct Writer::Impl {
  Impl(const comm::Runtime& runtime, std::string file_path)
      : rt(runtime),
        path(std::move(file_path)),
        watchdog(runtime.comm_timeout_s(), [this](const std::string& what, double elapsed) {
          comm::abort_job(
              where() + " watchdog: " + what + " did not complete within " + std::to_string(rt.comm_timeout_s()) +
                  " s (elapsed " + std::to_string(elapsed) +
                  " s): a rank is stuck in file I/O (NFS?), cut off from the network, hung or dead. Aborting the job.",
              kExitFatal);
        }) {}
  const comm::Runtime& rt;
  std::string path;
  // Every step below is collective file I/O: one stuck rank would hang every rank.
  comm::Watchdog watchdog;
  std::unique_ptr<comm::OwnComm> owned;  // a duplicate of the world made for this file, when the caller gave none
  const comm::OwnComm* comm = nullptr;   // where every collective runs: the caller's or `owned`
  h5::Id file, xfer, lcpl;
  // Per dataset, in creation order (the same on every rank): this rank's block checksums.
  struct Pending {
    std::string name, dtype;
    int64_t block_rows;
    std::vector<uint32_t> crcs;
  };
  std::vector<Pending> pending;
  std::map<std::string, int64_t> int_attrs;
  std::map<std::string, std::string> string_attrs;
  bool closed = false;

  void create();  // collective: the file and the property lists
  // Closing a parallel file is collective: a writer that was not closed drops its handles instead.
  void drop_handles() {
    const auto locked = h5::lock();
    xfer.reset();
    lcpl.reset();
    file.release();
  }

  // Runs `body` on every rank; if it throws on any rank, every rank throws SystemError (so no rank
  // waits in a collective the others have left).
  template <typename F>
  void agreed(const std::string& what, F&& body) {
    const uint64_t op = watchdog.begin("checkpoint " + path + ": " + what);
    comm::agree(rt, comm, body, [&](const comm::Failure& f) {
      watchdog.end(op);
      throw SystemError(path + ": checkpoint write failed (" + what + ") on rank " + std::to_string(f.rank) +
                        " (disk full, quota, or directory not writable?): " + f.message);
    });
    watchdog.end(op);
  }

  void create_and_write(const std::string& name, const std::vector<hsize_t>& dims, const TypeInfo& type,
                        int64_t first_row, int64_t row_count, const void* data) {
    agreed("dataset " + name, [&] {
      const auto locked = h5::lock();
      h5::QuietErrors quiet;  // the failure is reported once, by agreed(), not as HDF5's stack dump
      h5::Id space = create_space(dims);
      h5::Id dcpl = h5::plist_id(MERIDIAN_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
      MERIDIAN_H5_CHECK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));
      h5::Id dset =
          h5::dataset_id(MERIDIAN_H5_CHECK(H5Dcreate2(file, name.c_str(), type.file, space, lcpl, dcpl, H5P_DEFAULT)));
      h5::Id file_space = h5::space_id(MERIDIAN_H5_CHECK(H5Dget_space(dset)));
      select_rows(file_space, dims, first_row, row_count);
      std::vector<hsize_t> mem_dims(dims);
      if (mem_dims.empty()) mem_dims.push_back(1);
      mem_dims[0] = hsize_t(std::max<int64_t>(row_count, 1));
      h5::Id mem_space =
          h5::space_id(MERIDIAN_H5_CHECK(H5Screate_simple(int(mem_dims.size()), mem_dims.data(), nullptr)));
      if (row_count <= 0) MERIDIAN_H5_CHECK(H5Sselect_none(mem_space));
      MERIDIAN_H5_CHECK(H5Dwrite(dset, type.memory, mem_space, file_space, xfer, data));
      files().on_write(path, name);  // after the collective calls, as a failed write returns
    });
  }
};

Writer::Writer(const comm::Runtime& runtime, const std::string& path, const comm::OwnComm* own)
    : impl_(std::make_unique<Impl>(runtime, path)) {
  auto& m = *impl_;
  if (!own) m.owned = std::make_unique<comm::OwnComm>(runtime);
  m.comm = own ? own : m.owned.get();
  try {
    m.create();
  } catch (...) {
    m.drop_handles();  // the failure is agreed, yet closing a parallel file is collective: not while unwinding
    throw;             // impl_ goes, and with it `owned`
  }
}

void Writer::Impl::create() {
  auto& m = *this;
  m.agreed("create", [&] {
    const auto locked = h5::lock();
    h5::QuietErrors quiet;
    h5::Id fapl = h5::plist_id(MERIDIAN_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
    MERIDIAN_H5_CHECK(H5Pset_fapl_mpio(fapl, m.comm->get(), MPI_INFO_NULL));
    // HDF5 1.8+ object format: attributes over 64 KiB (a long config) are stored densely.
    MERIDIAN_H5_CHECK(H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST));
    const hid_t f = H5Fcreate(m.path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (f < 0) throw SystemError("cannot create the file (directory missing or not writable?)");
    m.file = h5::file_id(f);
    files().on_create(m.path);
    m.xfer = h5::plist_id(MERIDIAN_H5_CHECK(H5Pcreate(H5P_DATASET_XFER)));
    MERIDIAN_H5_CHECK(H5Pset_dxpl_mpio(m.xfer, H5FD_MPIO_COLLECTIVE));
    m.lcpl = h5::plist_id(MERIDIAN_H5_CHECK(H5Pcreate(H5P_LINK_CREATE)));
    MERIDIAN_H5_CHECK(H5Pset_create_intermediate_group(m.lcpl, 1));
  });
}

Writer::~Writer() {
  auto& m = *impl_;
  const auto locked = h5::lock();
  // Not closed: an error is unwinding (on every rank, since failures are agreed) or the caller
  // forgot close().
  if (!m.closed) m.drop_handles();
  m.owned.reset();
}

std::pair<int64_t, int64_t> Writer::share(const at::Tensor& tensor, int rank, int world) {
  const int64_t rows = rows_of(tensor), block_rows = block_rows_for(tensor);
  const int64_t blocks = (rows + block_rows - 1) / block_rows;
  const int64_t b0 = blocks * rank / world, b1 = blocks * (rank + 1) / world;
  return {b0 * block_rows, std::min(rows, b1 * block_rows)};
}

at::Tensor Writer::share_rows(const at::Tensor& tensor, int rank, int world) {
  const at::Tensor whole = tensor.detach();
  const auto [first, last] = share(whole, rank, world);
  return (whole.dim() == 0 ? whole.reshape({1}) : whole).narrow(0, first, std::max<int64_t>(0, last - first));
}

void Writer::replicated(const std::string& name, const at::Tensor& tensor) {
  auto& m = *impl_;
  // Only this rank's rows come to the host.
  replicated_rows(name, tensor.sizes().vec(), tensor.scalar_type(),
                  share_rows(tensor, m.rt.rank(), m.rt.size()).to(at::kCPU).contiguous());
}

void Writer::replicated_rows(const std::string& name, const std::vector<int64_t>& shape, at::ScalarType dtype,
                             const at::Tensor& rows_part) {
  auto& m = *impl_;
  const at::Tensor whole = at::empty(shape, at::TensorOptions().dtype(dtype).device(at::kMeta));
  const TypeInfo type = type_info(dtype);
  const int64_t rows = rows_of(whole), block_rows = block_rows_for(whole);
  const auto [first, last] = share(whole, m.rt.rank(), m.rt.size());
  const at::Tensor mine = rows_part.to(at::kCPU).contiguous();
  if (mine.size(0) != std::max<int64_t>(0, last - first))
    throw std::invalid_argument("replicated_rows '" + name + "': " + std::to_string(mine.size(0)) +
                                " rows given, this rank's share is " + std::to_string(last - first));
  const int64_t row_bytes = last > first ? int64_t(mine.nbytes()) / (last - first) : 0;
  m.create_and_write(name, shape_of(whole), type, first, last - first, mine.data_ptr());
  Impl::Pending p{name, type.name, block_rows, {}};
  for (int64_t a = first; a < last; a += block_rows) {
    const int64_t e = std::min(rows, a + block_rows);
    p.crcs.push_back(
        crc32c(static_cast<const uint8_t*>(mine.data_ptr()) + (a - first) * row_bytes, size_t((e - a) * row_bytes)));
  }
  m.pending.push_back(std::move(p));
}

void Writer::sharded(const std::string& name, int64_t total, int64_t first, const at::Tensor& part, int64_t block) {
  auto& m = *impl_;
  const at::Tensor mine = part.detach().reshape({-1}).to(at::kCPU).contiguous();
  const int64_t count = mine.numel(), end = first + count;
  // Agreed, so a misaligned range on one rank fails every rank instead of leaving them in a collective.
  m.agreed("dataset " + name + " (ranges)", [&] {
    if (block < 1 || first < 0 || end > total || (count > 0 && first % block != 0) ||
        (count > 0 && end != total && end % block != 0))
      throw std::invalid_argument("sharded '" + name + "': rows [" + std::to_string(first) + ", " +
                                  std::to_string(end) + ") of " + std::to_string(total) +
                                  " are not aligned to blocks of " + std::to_string(block));
  });
  const TypeInfo type = type_info(mine.scalar_type());
  m.create_and_write(name, {hsize_t(total)}, type, first, count, mine.data_ptr());
  Impl::Pending p{name, type.name, block, {}};
  const auto* bytes = static_cast<const uint8_t*>(mine.data_ptr());
  const int64_t item = int64_t(mine.element_size());
  for (int64_t a = first; a < end; a += block)
    p.crcs.push_back(crc32c(bytes + (a - first) * item, size_t((std::min(end, a + block) - a) * item)));
  m.pending.push_back(std::move(p));
}

void Writer::per_rank(const std::string& name, const at::Tensor& mine) {
  auto& m = *impl_;
  const at::Tensor t = mine.detach().to(at::kCPU).contiguous();
  // Every rank creates every rank's dataset (creation is collective), then writes only its own.
  std::string shape = type_info(t.scalar_type()).name;
  for (auto s : t.sizes()) shape += " " + std::to_string(s);
  const auto shapes = comm::allgather_strings(m.rt, m.comm->get(), shape);
  for (int r = 0; r < m.rt.size(); ++r) {
    std::stringstream ss(shapes[size_t(r)]);
    std::string dtype;
    ss >> dtype;
    std::vector<hsize_t> dims;
    for (hsize_t d; ss >> d;) dims.push_back(d);
    const TypeInfo type = type_info(scalar_type(dtype, m.path, name));
    const bool own = r == m.rt.rank();
    const int64_t rows = dims.empty() ? 1 : int64_t(dims[0]);
    const std::string dataset = "ranks/" + std::to_string(r) + "/" + name;
    m.create_and_write(dataset, dims, type, 0, own ? rows : 0, own ? t.data_ptr() : nullptr);
    Impl::Pending p{dataset, dtype, std::max<int64_t>(rows, 1), {}};
    if (own && rows > 0) p.crcs.push_back(crc32c(t.data_ptr(), t.nbytes()));
    m.pending.push_back(std::move(p));
  }
}

void Writer::attribute(const std::string& name, int64_t value) { impl_->int_attrs[name] = value; }
void Writer::attribute(const std::string& name, const std::string& value) { impl_->string_attrs[name] = value; }

void Writer::close() {
  auto& m = *impl_;
  // Every rank's checksums for every dataset, in rank order (= block order).
  std::string mine;
  for (const auto& p : m.pending) {
    const uint32_t n = uint32_t(p.crcs.size());
    mine.append(reinterpret_cast<const char*>(&n), 4);
    mine.append(reinterpret_cast<const char*>(p.crcs.data()), p.crcs.size() * 4);
  }
  const auto all = comm::allgather_strings(m.rt, m.comm->get(), mine);
  std::vector<std::vector<uint32_t>> crcs(m.pending.size());
  for (const auto& from : all) {
    size_t at = 0;
    for (size_t i = 0; i < m.pending.size(); ++i) {
      uint32_t n = 0;
      std::memcpy(&n, from.data() + at, 4);
      at += 4;
      const size_t before = crcs[i].size();
      crcs[i].resize(before + n);
      std::memcpy(crcs[i].data() + before, from.data() + at, size_t(n) * 4);
      at += size_t(n) * 4;
    }
  }
  // Rank 0's attribute values for everyone (attribute writes are collective with equal values).
  std::string attrs;
  for (const auto& [k, v] : m.int_attrs) attrs += "i" + k + '\0' + std::to_string(v) + '\0';
  for (const auto& [k, v] : m.string_attrs) attrs += "s" + k + '\0' + v + '\0';
  const std::string root_attrs = comm::allgather_strings(m.rt, m.comm->get(), attrs)[0];
  m.agreed("attributes", [&] {
    const auto locked = h5::lock();
    h5::QuietErrors quiet;
    for (size_t i = 0; i < m.pending.size(); ++i) {
      h5::Id dset = h5::dataset_id(MERIDIAN_H5_CHECK(H5Dopen2(m.file, m.pending[i].name.c_str(), H5P_DEFAULT)));
      h5::write_attr(dset, "dtype", m.pending[i].dtype);
      h5::write_attr(dset, "block_rows", m.pending[i].block_rows);
      write_u32_array_attr(dset, "crc32c", crcs[i]);
    }
    h5::write_attr(m.file, "format", std::string("meridian-checkpoint"));
    h5::write_attr(m.file, "format_version", int64_t(1));
    h5::write_attr(m.file, "world_size", int64_t(m.rt.size()));
    for (size_t at = 0; at < root_attrs.size();) {
      const char kind = root_attrs[at];
      const std::string key(root_attrs.c_str() + at + 1);
      at += 1 + key.size() + 1;
      const std::string value(root_attrs.c_str() + at);
      at += value.size() + 1;
      if (kind == 'i')
        h5::write_attr(m.file, key, int64_t(std::stoll(value)));
      else
        h5::write_attr(m.file, key, value);
    }
  });
  m.agreed("close", [&] {
    const auto locked = h5::lock();
    h5::QuietErrors quiet;
    m.xfer.reset();
    m.lcpl.reset();
    const hid_t f = m.file.get();
    m.file.release();
    m.closed = true;
    MERIDIAN_H5_CHECK(H5Fclose(f));
  });
  // Durable before the caller renames it into place: every rank flushes what its node's page cache
  // holds of the file (on NFS each client's own writes).
  m.agreed("fsync", [&] { files().sync_file(m.path); });
}

// ---------------------------------------------------------------------------------------------
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
