#include "encoding.h"

#include <algorithm>
#include <stdexcept>

#include "meridian/core/error.h"

namespace meridian::ckpt::detail {

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

}  // namespace meridian::ckpt::detail
