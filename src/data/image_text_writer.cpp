#include "image_text_writer.h"

#include "meridian/comm/mpi_interop.h"
#include "meridian/core/version.h"
#include "meridian/data/format.h"
#include "meridian/data/tokenizer.h"

namespace meridian::data {

namespace {
// Rows per chunk of /tokens: small, so a random sample reads little beyond itself (a chunk is read
// whole), yet few enough chunks for 10M samples.
constexpr hsize_t kTokenChunkRows = 8;

h5::Id create(hid_t file, const char* name, hid_t type, const std::vector<hsize_t>& dims,
              const std::vector<hsize_t>& chunk) {
  std::vector<hsize_t> maxdims(dims);
  maxdims[0] = H5S_UNLIMITED;
  h5::Id space = h5::space_id(MERIDIAN_H5_CHECK(H5Screate_simple(int(dims.size()), dims.data(), maxdims.data())));
  h5::Id dcpl = h5::plist_id(MERIDIAN_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  MERIDIAN_H5_CHECK(H5Pset_chunk(dcpl, int(chunk.size()), chunk.data()));
  // Space for the whole capacity at creation (parallel HDF5 requires early allocation anyway), no
  // fill: every kept row is written.
  MERIDIAN_H5_CHECK(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY));
  MERIDIAN_H5_CHECK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));
  return h5::dataset_id(MERIDIAN_H5_CHECK(H5Dcreate2(file, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)));
}

void write_slab(hid_t dset, hid_t xfer, int64_t first, int64_t rows, hid_t mem_type, const void* data) {
  auto d = h5::dims(dset);
  h5::Id file_space = h5::space_id(MERIDIAN_H5_CHECK(H5Dget_space(dset)));
  std::vector<hsize_t> off(d.size(), 0), cnt(d);
  off[0] = hsize_t(first);
  cnt[0] = hsize_t(rows);
  h5::Id mem_space = h5::space_id(MERIDIAN_H5_CHECK(H5Screate_simple(int(cnt.size()), cnt.data(), nullptr)));
  if (rows > 0) {
    MERIDIAN_H5_CHECK(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, off.data(), nullptr, cnt.data(), nullptr));
  } else {
    // Collective write with nothing to contribute: empty selections, but the call is still made.
    MERIDIAN_H5_CHECK(H5Sselect_none(file_space));
    MERIDIAN_H5_CHECK(H5Sselect_none(mem_space));
  }
  MERIDIAN_H5_CHECK(H5Dwrite(dset, mem_type, mem_space, file_space, xfer, data));
}
}  // namespace

struct ImageTextWriter::State {
  ImageTextShape shape;
  MPI_Comm comm = MPI_COMM_NULL;
  h5::Id file, images, tokens, lengths, labels, xfer;
  bool closed = false;
};

ImageTextWriter::ImageTextWriter(const comm::Runtime& runtime, const std::string& path, const ImageTextShape& shape)
    : s_(std::make_unique<State>()) {
  const auto locked = h5::lock();
  s_->shape = shape;
  s_->comm = comm::duplicate_world(runtime);
  h5::Id fapl = h5::plist_id(MERIDIAN_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
  MERIDIAN_H5_CHECK(H5Pset_fapl_mpio(fapl, s_->comm, MPI_INFO_NULL));
  s_->file = h5::file_id(MERIDIAN_H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl)));
  const hsize_t n = std::max<int64_t>(1, shape.capacity), h = shape.size, c = shape.channels, k = shape.captions,
                l = shape.context;
  s_->images = create(s_->file, "/images", H5T_STD_U8LE, {n, h, h, c}, {1, h, h, c});
  const hsize_t tok_rows = std::min<hsize_t>(n, kTokenChunkRows);
  s_->tokens = create(s_->file, "/tokens", H5T_STD_I32LE, {n, k, l}, {tok_rows, k, l});
  s_->lengths = create(s_->file, "/token_lengths", H5T_STD_I32LE, {n, k}, {std::min<hsize_t>(n, 1024), k});
  s_->labels = create(s_->file, "/labels", H5T_STD_I32LE, {n}, {std::min<hsize_t>(n, 4096)});
  s_->xfer = h5::plist_id(MERIDIAN_H5_CHECK(H5Pcreate(H5P_DATASET_XFER)));
  MERIDIAN_H5_CHECK(H5Pset_dxpl_mpio(s_->xfer, H5FD_MPIO_COLLECTIVE));
}

ImageTextWriter::~ImageTextWriter() {
  const auto locked = h5::lock();
  s_->images.reset();
  s_->tokens.reset();
  s_->lengths.reset();
  s_->labels.reset();
  s_->xfer.reset();
  s_->file.reset();
  comm::free_comm(s_->comm);
}

void ImageTextWriter::write_rows(int64_t first, int64_t rows, const uint8_t* images, const int32_t* tokens,
                                 const int32_t* lengths, const int32_t* labels) {
  const auto locked = h5::lock();
  write_slab(s_->images, s_->xfer, first, rows, H5T_NATIVE_UINT8, images);
  write_slab(s_->tokens, s_->xfer, first, rows, H5T_NATIVE_INT32, tokens);
  write_slab(s_->lengths, s_->xfer, first, rows, H5T_NATIVE_INT32, lengths);
  write_slab(s_->labels, s_->xfer, first, rows, H5T_NATIVE_INT32, labels);
}

void ImageTextWriter::close(int64_t count) {
  const auto locked = h5::lock();
  for (hid_t d : {s_->images.get(), s_->tokens.get(), s_->lengths.get(), s_->labels.get()}) {
    auto dims = h5::dims(d);
    dims[0] = hsize_t(count);
    MERIDIAN_H5_CHECK(H5Dset_extent(d, dims.data()));  // collective
  }
  s_->images.reset();
  s_->tokens.reset();
  s_->lengths.reset();
  s_->labels.reset();
  s_->xfer.reset();
  s_->file.reset();  // collective close
  comm::free_comm(s_->comm);
}

ImageTextFinisher::ImageTextFinisher(const std::string& path, int64_t count, int64_t captions)
    : path_(path), count_(count), captions_(captions) {
  const auto locked = h5::lock();
  file_ = h5::file_id(MERIDIAN_H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)));
  h5::Id type = h5::vlen_string_type();
  const hsize_t n = hsize_t(count), dims2[2] = {n, hsize_t(captions)};
  h5::Id s1 = h5::space_id(MERIDIAN_H5_CHECK(H5Screate_simple(1, &n, nullptr)));
  h5::Id s2 = h5::space_id(MERIDIAN_H5_CHECK(H5Screate_simple(2, dims2, nullptr)));
  names_ = h5::dataset_id(MERIDIAN_H5_CHECK(H5Dcreate2(file_, "/names", type, s1, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
  captions_ds_ =
      h5::dataset_id(MERIDIAN_H5_CHECK(H5Dcreate2(file_, "/captions", type, s2, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
}

void ImageTextFinisher::write_strings(int64_t first, const std::vector<std::string>& names,
                                      const std::vector<std::string>& captions) {
  const auto locked = h5::lock();
  if (names.empty()) return;
  MERIDIAN_CHECK(first >= 0 && first + int64_t(names.size()) <= count_, "string rows out of range");
  MERIDIAN_CHECK(captions.size() == names.size() * size_t(captions_), "captions per row mismatch");
  h5::Id type = h5::vlen_string_type();
  const auto write = [&](hid_t dset, const std::vector<std::string>& values, int64_t width) {
    h5::Id file_space = h5::space_id(MERIDIAN_H5_CHECK(H5Dget_space(dset)));
    const int rank = H5Sget_simple_extent_ndims(file_space);
    hsize_t off[2] = {hsize_t(first), 0}, cnt[2] = {hsize_t(names.size()), hsize_t(width)};
    MERIDIAN_H5_CHECK(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, off, nullptr, cnt, nullptr));
    const hsize_t total = values.size();
    h5::Id mem = h5::space_id(MERIDIAN_H5_CHECK(H5Screate_simple(1, &total, nullptr)));
    (void)rank;
    std::vector<const char*> ptrs;
    for (const auto& v : values) ptrs.push_back(v.c_str());
    MERIDIAN_H5_CHECK(H5Dwrite(dset, type, mem, file_space, H5P_DEFAULT, ptrs.data()));
  };
  write(names_, names, 1);
  write(captions_ds_, captions, captions_);
}

void ImageTextFinisher::finish(const Tokenizer& tokenizer, const std::vector<std::string>& class_names,
                               const std::string& split) {
  const auto locked = h5::lock();
  names_.reset();
  captions_ds_.reset();
  if (!class_names.empty()) h5::write_strings(file_, "/class_names", class_names);
  h5::Id group =
      h5::group_id(MERIDIAN_H5_CHECK(H5Gcreate2(file_, "/tokenizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
  h5::write_bytes(group, "model", tokenizer.model_bytes());
  h5::write_attr(group, "type", std::string("sentencepiece"));
  h5::write_attr(group, "vocab_size", int64_t(tokenizer.vocab_size()));
  h5::write_attr(group, "pad_id", int64_t(tokenizer.pad_id()));
  h5::write_attr(group, "eos_id", int64_t(tokenizer.eos_id()));
  group.reset();
  h5::write_attr(file_, "format", std::string(kFormatName));
  h5::write_attr(file_, "format_version", kFormatVersion);
  h5::write_attr(file_, "kind", std::string("image_text"));
  h5::write_attr(file_, "created_by", created_by());
  h5::write_attr(file_, "split", split);
  h5::write_attr(file_, "count", count_);
  MERIDIAN_H5_CHECK(H5Fflush(file_, H5F_SCOPE_GLOBAL));
  h5::write_attr(file_, "complete", int64_t(1));  // last: a file without it is never read
  file_.reset();
}

ImageTextFinisher::~ImageTextFinisher() {
  const auto locked = h5::lock();
  names_.reset();
  captions_ds_.reset();
  file_.reset();
}

}  // namespace meridian::data
