// The checkpoint file's Writer: collective MPI-IO through parallel HDF5, each rank writing and
// checksumming its share of every replicated tensor, every failure agreed by all ranks.
#include <cstring>
#include <map>
#include <sstream>

#include "encoding.h"
#include "meridian/ckpt/file.h"
#include "meridian/ckpt/files.h"
#include "meridian/comm/agree.h"
#include "meridian/comm/mpi_interop.h"
#include "meridian/comm/runtime.h"
#include "meridian/comm/watchdog.h"
#include "meridian/core/crc32c.h"
#include "meridian/core/error.h"
#include "seal.h"

namespace meridian::ckpt {

using namespace detail;

struct Writer::Impl {
  Impl(const comm::Runtime& runtime, std::string file_path)
      : rt(runtime),
        path(std::move(file_path)),
        watchdog(runtime.comm_timeout_s(), [this](const std::string& what, double elapsed) {
          // Numbers as the communicators' watchdog writes them ("within 10 s", not "10.000000 s").
          std::ostringstream os;
          os << where() << " watchdog: " << what << " did not complete within " << rt.comm_timeout_s() << " s (elapsed "
             << elapsed
             << " s): a rank is stuck in file I/O (NFS?), cut off from the network, hung or dead. Aborting the job.";
          comm::abort_job(os.str(), kExitFatal);
        }) {}
  const comm::Runtime& rt;
  double seal_seconds = 0;  // close(): this rank's time for the whole-file checksum
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
      // A tensor without elements has no storage for MPI-IO to write to (HDF5 fails on its undefined
      // address): every rank skips the write alike, since every rank knows the shape.
      hsize_t elements = 1;
      for (const hsize_t d : dims) elements *= d;
      if (elements > 0) MERIDIAN_H5_CHECK(H5Dwrite(dset, type.memory, mem_space, file_space, xfer, data));
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
    // The user block that seal_file() fills with the whole-file checksum (seal.h).
    h5::Id fcpl = h5::plist_id(MERIDIAN_H5_CHECK(H5Pcreate(H5P_FILE_CREATE)));
    MERIDIAN_H5_CHECK(H5Pset_userblock(fcpl, kSealBytes));
    const hid_t f = H5Fcreate(m.path.c_str(), H5F_ACC_TRUNC, fcpl, fapl);
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
      if (n > 0) std::memcpy(crcs[i].data() + before, from.data() + at, size_t(n) * 4);  // data() may be null
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
  // The whole-file checksum into the user block, before anything may name the file (seal.h).
  m.seal_seconds = seal_file(m.rt, m.comm, m.path);
}

double Writer::seal_seconds() const { return impl_->seal_seconds; }

}  // namespace meridian::ckpt
