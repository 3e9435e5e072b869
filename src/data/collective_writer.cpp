#include "collective_writer.h"

#include "meridian/comm/mpi_interop.h"
#include "meridian/core/version.h"
#include "meridian/data/format.h"
#include "meridian/data/tokenizer.h"

namespace meridian::data {

struct CollectiveWriter::State {
  MPI_Comm comm = MPI_COMM_NULL;
  h5::Id file, xfer;
  std::map<std::string, h5::Id> datasets;
};

CollectiveWriter::CollectiveWriter(const comm::Runtime& runtime, const std::string& path)
    : s_(std::make_unique<State>()) {
  const auto locked = h5::lock();
  s_->comm = comm::duplicate_world(runtime);
  h5::Id fapl = h5::plist_id(MERIDIAN_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
  MERIDIAN_H5_CHECK(H5Pset_fapl_mpio(fapl, s_->comm, MPI_INFO_NULL));
  s_->file = h5::file_id(MERIDIAN_H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl)));
  s_->xfer = h5::plist_id(MERIDIAN_H5_CHECK(H5Pcreate(H5P_DATASET_XFER)));
  MERIDIAN_H5_CHECK(H5Pset_dxpl_mpio(s_->xfer, H5FD_MPIO_COLLECTIVE));
}

CollectiveWriter::~CollectiveWriter() {
  const auto locked = h5::lock();
  if (s_->file.valid() && std::uncaught_exceptions() > 0) {
    // Unwinding, possibly on this rank alone: the collective closes could wait forever for ranks
    // that are elsewhere. Leave the handles; the job is ending (abort_job) or the file is removed.
    for (auto& [name, dset] : s_->datasets) dset.release();
    s_->xfer.reset();
    s_->file.release();
    return;
  }
  s_->datasets.clear();
  s_->xfer.reset();
  s_->file.reset();
  comm::free_comm(s_->comm);
}

void CollectiveWriter::create(const std::string& name, hid_t file_type, const std::vector<hsize_t>& row_dims,
                              int64_t capacity, hsize_t chunk_rows) {
  const auto locked = h5::lock();
  std::vector<hsize_t> dims{hsize_t(std::max<int64_t>(1, capacity))}, chunk{std::max<hsize_t>(1, chunk_rows)};
  dims.insert(dims.end(), row_dims.begin(), row_dims.end());
  chunk.insert(chunk.end(), row_dims.begin(), row_dims.end());
  std::vector<hsize_t> maxdims(dims);
  maxdims[0] = H5S_UNLIMITED;
  h5::Id space = h5::space_id(MERIDIAN_H5_CHECK(H5Screate_simple(int(dims.size()), dims.data(), maxdims.data())));
  h5::Id dcpl = h5::plist_id(MERIDIAN_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  MERIDIAN_H5_CHECK(H5Pset_chunk(dcpl, int(chunk.size()), chunk.data()));
  // Space at creation (parallel HDF5 allocates early anyway), no fill: every kept row is written.
  MERIDIAN_H5_CHECK(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY));
  MERIDIAN_H5_CHECK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));
  s_->datasets[name] = h5::dataset_id(
      MERIDIAN_H5_CHECK(H5Dcreate2(s_->file, name.c_str(), file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)));
}

bool CollectiveWriter::has(const std::string& name) const { return s_->datasets.count(name) > 0; }

void CollectiveWriter::reserve(const std::string& name, int64_t rows) {
  const auto locked = h5::lock();
  hid_t d = s_->datasets.at(name);
  auto dims = h5::dims(d);
  if (int64_t(dims[0]) >= rows) return;
  // By a quarter at a time: parallel HDF5 allocates the new chunks at once and a shrink at close
  // does not give their space back, so a file keeps at most a fifth of a dataset unused (doubling
  // left up to half: 0.36 GB of a 1.8 GB file).
  while (int64_t(dims[0]) < rows) dims[0] += std::max<hsize_t>(1, dims[0] / 4);
  MERIDIAN_H5_CHECK(H5Dset_extent(d, dims.data()));
}

void CollectiveWriter::write(const std::string& name, int64_t first, int64_t rows, hid_t mem_type, const void* data) {
  const auto locked = h5::lock();
  hid_t dset = s_->datasets.at(name);
  auto d = h5::dims(dset);
  h5::Id file_space = h5::space_id(MERIDIAN_H5_CHECK(H5Dget_space(dset)));
  std::vector<hsize_t> off(d.size(), 0), cnt(d);
  off[0] = hsize_t(first);
  cnt[0] = hsize_t(rows);
  h5::Id mem_space = h5::space_id(MERIDIAN_H5_CHECK(H5Screate_simple(int(cnt.size()), cnt.data(), nullptr)));
  if (rows > 0) {
    MERIDIAN_H5_CHECK(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, off.data(), nullptr, cnt.data(), nullptr));
  } else {
    MERIDIAN_H5_CHECK(H5Sselect_none(file_space));
    MERIDIAN_H5_CHECK(H5Sselect_none(mem_space));
  }
  MERIDIAN_H5_CHECK(H5Dwrite(dset, mem_type, mem_space, file_space, s_->xfer, data));
}

void CollectiveWriter::close(const std::map<std::string, int64_t>& rows) {
  const auto locked = h5::lock();
  for (auto& [name, dset] : s_->datasets) {  // std::map: the same order on every rank
    auto dims = h5::dims(dset);
    dims[0] = hsize_t(rows.at(name));
    MERIDIAN_H5_CHECK(H5Dset_extent(dset, dims.data()));
  }
  s_->datasets.clear();
  s_->xfer.reset();
  s_->file.reset();  // collective close
  comm::free_comm(s_->comm);
}

Finisher::Finisher(const std::string& path) {
  const auto locked = h5::lock();
  file_ = h5::file_id(MERIDIAN_H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)));
}

Finisher::~Finisher() {
  const auto locked = h5::lock();
  strings_.clear();
  file_.reset();
}

void Finisher::create_strings(const std::string& name, const std::vector<hsize_t>& dims) {
  const auto locked = h5::lock();
  h5::Id type = h5::vlen_string_type();
  h5::Id space = h5::space_id(MERIDIAN_H5_CHECK(H5Screate_simple(int(dims.size()), dims.data(), nullptr)));
  strings_[name] = h5::dataset_id(
      MERIDIAN_H5_CHECK(H5Dcreate2(file_, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
}

void Finisher::write_strings(const std::string& name, int64_t first, int64_t rows,
                             const std::vector<std::string>& values) {
  const auto locked = h5::lock();
  if (rows == 0) return;
  hid_t dset = strings_.at(name);
  const auto d = h5::dims(dset);
  MERIDIAN_CHECK(first >= 0 && first + rows <= int64_t(d[0]), "string rows out of range");
  h5::Id type = h5::vlen_string_type();
  h5::Id file_space = h5::space_id(MERIDIAN_H5_CHECK(H5Dget_space(dset)));
  std::vector<hsize_t> off(d.size(), 0), cnt(d);
  off[0] = hsize_t(first);
  cnt[0] = hsize_t(rows);
  hsize_t total = 1;
  for (auto c : cnt) total *= c;
  MERIDIAN_CHECK(values.size() == total, "string values do not fill the rows");
  MERIDIAN_H5_CHECK(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, off.data(), nullptr, cnt.data(), nullptr));
  h5::Id mem = h5::space_id(MERIDIAN_H5_CHECK(H5Screate_simple(1, &total, nullptr)));
  std::vector<const char*> ptrs;
  for (const auto& v : values) ptrs.push_back(v.c_str());
  MERIDIAN_H5_CHECK(H5Dwrite(dset, type, mem, file_space, H5P_DEFAULT, ptrs.data()));
}

void Finisher::write_int64(const std::string& name, int64_t index, int64_t value) {
  const auto locked = h5::lock();
  h5::Id dset = h5::dataset_id(MERIDIAN_H5_CHECK(H5Dopen2(file_, name.c_str(), H5P_DEFAULT)));
  h5::Id file_space = h5::space_id(MERIDIAN_H5_CHECK(H5Dget_space(dset)));
  const hsize_t off = hsize_t(index), one = 1;
  MERIDIAN_H5_CHECK(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, &off, nullptr, &one, nullptr));
  h5::Id mem = h5::space_id(MERIDIAN_H5_CHECK(H5Screate_simple(1, &one, nullptr)));
  MERIDIAN_H5_CHECK(H5Dwrite(dset, H5T_NATIVE_INT64, mem, file_space, H5P_DEFAULT, &value));
}

void Finisher::write_int64_list(const std::string& name, const std::vector<int64_t>& values) {
  const auto locked = h5::lock();
  const hsize_t n = values.size();
  h5::Id space = h5::space_id(MERIDIAN_H5_CHECK(H5Screate_simple(1, &n, nullptr)));
  h5::Id dset = h5::dataset_id(
      MERIDIAN_H5_CHECK(H5Dcreate2(file_, name.c_str(), H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
  MERIDIAN_H5_CHECK(H5Dwrite(dset, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()));
}

void Finisher::write_string_list(const std::string& name, const std::vector<std::string>& values) {
  const auto locked = h5::lock();
  h5::write_strings(file_, name, values);
}

void Finisher::write_tokenizer(const Tokenizer& tokenizer) {
  const auto locked = h5::lock();
  h5::Id group =
      h5::group_id(MERIDIAN_H5_CHECK(H5Gcreate2(file_, "/tokenizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
  h5::write_bytes(group, "model", tokenizer.model_bytes());
  h5::write_attr(group, "type", std::string("sentencepiece"));
  h5::write_attr(group, "vocab_size", int64_t(tokenizer.vocab_size()));
  h5::write_attr(group, "pad_id", int64_t(tokenizer.pad_id()));
  h5::write_attr(group, "eos_id", int64_t(tokenizer.eos_id()));
  h5::write_attr(group, "lower_case", int64_t(tokenizer.rules().lower_case));
  h5::write_attr(group, "strip_punctuation", int64_t(tokenizer.rules().strip_punctuation));
  h5::write_attr(group, "add_bos", int64_t(tokenizer.rules().add_bos));
  h5::write_attr(group, "prefix", int64_t(tokenizer.rules().prefix));
}

void Finisher::write_image_format(const std::string& encoding, int64_t height, int64_t width) {
  const auto locked = h5::lock();
  h5::write_attr(file_, "image_encoding", encoding);
  h5::write_attr(file_, "image_height", height);
  h5::write_attr(file_, "image_width", width);
}

void Finisher::finish(const std::string& kind, const std::string& split, int64_t count) {
  const auto locked = h5::lock();
  strings_.clear();
  h5::write_attr(file_, "format", std::string(kFormatName));
  h5::write_attr(file_, "format_version", kFormatVersion);
  h5::write_attr(file_, "kind", kind);
  h5::write_attr(file_, "created_by", created_by());
  h5::write_attr(file_, "split", split);
  h5::write_attr(file_, "count", count);
  MERIDIAN_H5_CHECK(H5Fflush(file_, H5F_SCOPE_GLOBAL));
  h5::write_attr(file_, "complete", int64_t(1));  // last: a file without it is never read
  file_.reset();
}

RaggedColumns::RaggedColumns(const comm::Runtime& runtime, CollectiveWriter& writer, std::vector<std::string> columns,
                             std::string offsets)
    : rt_(runtime), writer_(writer), columns_(std::move(columns)), offsets_(std::move(offsets)) {}

int64_t RaggedColumns::place(int64_t elements) {
  elements_ = elements;
  first_ = total_ + rt_.exclusive_prefix_sum(elements);
  const int64_t round = rt_.sum(elements);
  for (const auto& c : columns_) writer_.reserve(c, total_ + round);
  total_ += round;
  return first_;
}

void RaggedColumns::write(const std::string& column, hid_t mem_type, const void* data) {
  writer_.write(column, first_, elements_, mem_type, data);
}

void RaggedColumns::write_offsets(int64_t first_row, std::vector<int64_t> starts) {
  for (auto& s : starts) s += first_;
  writer_.write(offsets_, first_row, int64_t(starts.size()), H5T_NATIVE_INT64, starts.data());
}

}  // namespace meridian::data
