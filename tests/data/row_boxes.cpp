// The boxes of one row of a detection file, read the plain way (the file opened per call, each
// column read whole and sliced here): what the tests compare DatasetReader::read_boxes and the
// loaders against.
#include <stdexcept>

#include "data_test.h"
#include "h5.h"

namespace meridian::test {

namespace {
// A whole dataset, flattened.
template <typename T>
std::vector<T> read_whole(hid_t file, const char* name, hid_t mem_type) {
  h5::Id dset = h5::dataset_id(MERIDIAN_H5_CHECK(H5Dopen2(file, name, H5P_DEFAULT)));
  size_t n = 1;
  for (const hsize_t d : h5::dims(dset)) n *= size_t(d);
  std::vector<T> out(n);
  if (n > 0) MERIDIAN_H5_CHECK(H5Dread(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()));
  return out;
}
}  // namespace

data::RowBoxes row_boxes(const data::DatasetInfo& info, int64_t row) {
  if (info.kind != "detection") throw DataError(info.path, "attribute 'kind'", "expected a detection dataset");
  if (row < 0 || row >= info.count) throw std::out_of_range("row_boxes: row out of range");
  size_t part = 0;
  for (; row >= info.parts[part].count; ++part) row -= info.parts[part].count;
  const auto locked = h5::lock();
  h5::Id file = h5::file_id(MERIDIAN_H5_CHECK(H5Fopen(info.parts[part].path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)));
  const auto off = read_whole<int64_t>(file, "/box_offsets", H5T_NATIVE_INT64);
  const auto flat = read_whole<float>(file, "/boxes", H5T_NATIVE_FLOAT);
  const auto classes = read_whole<int32_t>(file, "/box_classes", H5T_NATIVE_INT32);
  data::RowBoxes r;
  for (int64_t i = off[size_t(row)]; i < off[size_t(row) + 1]; ++i) {
    r.boxes.push_back({flat[4 * i], flat[4 * i + 1], flat[4 * i + 2], flat[4 * i + 3]});
    r.classes.push_back(classes[size_t(i)]);
  }
  return r;
}

}  // namespace meridian::test
