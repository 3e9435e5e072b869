#include "h5.h"

namespace meridian::h5 {

namespace detail {
std::string h5_error_message() {
  std::string message;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned, const H5E_error2_t* err, void* out) -> herr_t {
        auto* m = static_cast<std::string*>(out);
        if (m->empty() && err && err->desc) *m = std::string(err->func_name ? err->func_name : "") + ": " + err->desc;
        return 0;
      },
      &message);
  return message.empty() ? "no message on the HDF5 error stack" : message;
}
}  // namespace detail

std::unique_lock<std::recursive_mutex> lock() {
  static std::recursive_mutex mu;
  return std::unique_lock<std::recursive_mutex>(mu);
}

Id file_id(hid_t id) { return Id(id, H5Fclose); }
Id dataset_id(hid_t id) { return Id(id, H5Dclose); }
Id space_id(hid_t id) { return Id(id, H5Sclose); }
Id type_id(hid_t id) { return Id(id, H5Tclose); }
Id plist_id(hid_t id) { return Id(id, H5Pclose); }
Id group_id(hid_t id) { return Id(id, H5Gclose); }
Id attr_id(hid_t id) { return Id(id, H5Aclose); }

Id vlen_string_type() {
  Id t = type_id(MERIDIAN_H5_CHECK(H5Tcopy(H5T_C_S1)));
  MERIDIAN_H5_CHECK(H5Tset_size(t, H5T_VARIABLE));
  MERIDIAN_H5_CHECK(H5Tset_cset(t, H5T_CSET_UTF8));
  return t;
}

bool exists(hid_t loc, const std::string& path) {
  // H5Lexists fails on a missing intermediate group: walk the path.
  std::string prefix;
  size_t pos = 0;
  while (pos != std::string::npos) {
    const size_t next = path.find('/', pos + 1);
    prefix = path.substr(0, next);
    if (!prefix.empty() && prefix != "/" && H5Lexists(loc, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    pos = next;
  }
  return true;
}

std::vector<hsize_t> dims(hid_t dataset) {
  Id space = space_id(MERIDIAN_H5_CHECK(H5Dget_space(dataset)));
  const int rank = MERIDIAN_H5_CHECK(H5Sget_simple_extent_ndims(space));
  std::vector<hsize_t> d(rank);
  MERIDIAN_H5_CHECK(H5Sget_simple_extent_dims(space, d.data(), nullptr));
  return d;
}

std::vector<hsize_t> chunk_dims(hid_t dataset) {
  Id plist = plist_id(MERIDIAN_H5_CHECK(H5Dget_create_plist(dataset)));
  if (H5Pget_layout(plist) != H5D_CHUNKED) return {};
  std::vector<hsize_t> d(32);
  const int rank = MERIDIAN_H5_CHECK(H5Pget_chunk(plist, 32, d.data()));
  d.resize(rank);
  return d;
}

void write_attr(hid_t obj, const std::string& name, const std::string& value) {
  Id type = type_id(MERIDIAN_H5_CHECK(H5Tcopy(H5T_C_S1)));
  MERIDIAN_H5_CHECK(H5Tset_size(type, std::max<size_t>(1, value.size())));
  MERIDIAN_H5_CHECK(H5Tset_cset(type, H5T_CSET_UTF8));
  Id space = space_id(MERIDIAN_H5_CHECK(H5Screate(H5S_SCALAR)));
  if (H5Aexists(obj, name.c_str()) > 0) MERIDIAN_H5_CHECK(H5Adelete(obj, name.c_str()));
  Id attr = attr_id(MERIDIAN_H5_CHECK(H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT)));
  std::string padded = value.empty() ? std::string(1, '\0') : value;
  MERIDIAN_H5_CHECK(H5Awrite(attr, type, padded.data()));
}

void write_attr(hid_t obj, const std::string& name, int64_t value) {
  Id space = space_id(MERIDIAN_H5_CHECK(H5Screate(H5S_SCALAR)));
  if (H5Aexists(obj, name.c_str()) > 0) MERIDIAN_H5_CHECK(H5Adelete(obj, name.c_str()));
  Id attr = attr_id(MERIDIAN_H5_CHECK(H5Acreate2(obj, name.c_str(), H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT)));
  MERIDIAN_H5_CHECK(H5Awrite(attr, H5T_NATIVE_INT64, &value));
}

std::optional<std::string> read_attr_string(hid_t obj, const std::string& name) {
  if (H5Aexists(obj, name.c_str()) <= 0) return std::nullopt;
  Id attr = attr_id(MERIDIAN_H5_CHECK(H5Aopen(obj, name.c_str(), H5P_DEFAULT)));
  Id type = type_id(MERIDIAN_H5_CHECK(H5Aget_type(attr)));
  if (H5Tget_class(type) != H5T_STRING) return std::nullopt;
  if (H5Tis_variable_str(type) > 0) {
    Id mem = vlen_string_type();
    char* value = nullptr;
    MERIDIAN_H5_CHECK(H5Aread(attr, mem, &value));
    std::string out = value ? value : "";
    Id space = space_id(MERIDIAN_H5_CHECK(H5Aget_space(attr)));
    H5Dvlen_reclaim(mem, space, H5P_DEFAULT, &value);
    return out;
  }
  const size_t size = H5Tget_size(type);
  std::string out(size, '\0');
  MERIDIAN_H5_CHECK(H5Aread(attr, type, out.data()));
  out.resize(std::strlen(out.c_str()));
  return out;
}

std::optional<int64_t> read_attr_int(hid_t obj, const std::string& name) {
  if (H5Aexists(obj, name.c_str()) <= 0) return std::nullopt;
  Id attr = attr_id(MERIDIAN_H5_CHECK(H5Aopen(obj, name.c_str(), H5P_DEFAULT)));
  Id type = type_id(MERIDIAN_H5_CHECK(H5Aget_type(attr)));
  if (H5Tget_class(type) != H5T_INTEGER) return std::nullopt;
  int64_t value = 0;
  MERIDIAN_H5_CHECK(H5Aread(attr, H5T_NATIVE_INT64, &value));
  return value;
}

void write_strings(hid_t loc, const std::string& name, const std::vector<std::string>& values) {
  Id type = vlen_string_type();
  const hsize_t n = values.size();
  Id space = space_id(MERIDIAN_H5_CHECK(H5Screate_simple(1, &n, nullptr)));
  Id dset =
      dataset_id(MERIDIAN_H5_CHECK(H5Dcreate2(loc, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
  std::vector<const char*> ptrs;
  for (const auto& v : values) ptrs.push_back(v.c_str());
  if (n) MERIDIAN_H5_CHECK(H5Dwrite(dset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()));
}

std::vector<std::string> read_strings(hid_t dataset, hsize_t start, hsize_t count) {
  std::vector<std::string> out;
  if (count == 0) return out;
  Id type = vlen_string_type();
  Id file_space = space_id(MERIDIAN_H5_CHECK(H5Dget_space(dataset)));
  const int rank = MERIDIAN_H5_CHECK(H5Sget_simple_extent_ndims(file_space));
  std::vector<hsize_t> d(rank);
  MERIDIAN_H5_CHECK(H5Sget_simple_extent_dims(file_space, d.data(), nullptr));
  // Rows [start, start+count) of the first dimension, whole rows.
  std::vector<hsize_t> off(rank, 0), cnt(d);
  off[0] = start;
  cnt[0] = count;
  MERIDIAN_H5_CHECK(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, off.data(), nullptr, cnt.data(), nullptr));
  hsize_t total = 1;
  for (auto c : cnt) total *= c;
  Id mem_space = space_id(MERIDIAN_H5_CHECK(H5Screate_simple(1, &total, nullptr)));
  std::vector<char*> ptrs(total, nullptr);
  MERIDIAN_H5_CHECK(H5Dread(dataset, type, mem_space, file_space, H5P_DEFAULT, ptrs.data()));
  for (auto* p : ptrs) out.emplace_back(p ? p : "");
  H5Dvlen_reclaim(type, mem_space, H5P_DEFAULT, ptrs.data());
  return out;
}

void write_bytes(hid_t loc, const std::string& name, const std::string& bytes) {
  const hsize_t n = bytes.size();
  Id space = space_id(MERIDIAN_H5_CHECK(H5Screate_simple(1, &n, nullptr)));
  Id dset = dataset_id(
      MERIDIAN_H5_CHECK(H5Dcreate2(loc, name.c_str(), H5T_STD_U8LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
  if (n) MERIDIAN_H5_CHECK(H5Dwrite(dset, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()));
}

std::string read_bytes(hid_t dataset) {
  const auto d = dims(dataset);
  std::string out(d.empty() ? 0 : d[0], '\0');
  if (!out.empty()) MERIDIAN_H5_CHECK(H5Dread(dataset, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()));
  return out;
}

QuietErrors::QuietErrors() {
  H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}
QuietErrors::~QuietErrors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

}  // namespace meridian::h5
