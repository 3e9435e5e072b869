#include "meridian/data/embeddings.h"

#include <cstdio>

#include "h5.h"
#include "h5_check.h"
#include "meridian/core/error.h"

namespace meridian::data {

namespace {
void write_matrix(hid_t file, const char* name, const at::Tensor& t, hid_t type) {
  const hsize_t dims[2] = {hsize_t(t.size(0)), hsize_t(t.size(1))};
  h5::Id space = h5::space_id(MERIDIAN_H5_CHECK(H5Screate_simple(2, dims, nullptr)));
  h5::Id dset =
      h5::dataset_id(MERIDIAN_H5_CHECK(H5Dcreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
  if (t.numel()) MERIDIAN_H5_CHECK(H5Dwrite(dset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_ptr()));
}
}  // namespace

void write_embeddings(const std::string& path, const at::Tensor& embeddings, const std::vector<std::string>& names,
                      const at::Tensor& tokens, const std::string& model, const std::string& kind) {
  const std::string tmp = path + ".tmp";
  {
    auto guard = h5::lock();
    h5::Id file = h5::file_id(MERIDIAN_H5_CHECK(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)));
    h5::write_attr(file, "format", std::string("meridian-embeddings"));
    h5::write_attr(file, "model", model);
    h5::write_attr(file, "kind", kind);
    write_matrix(file, "embeddings", embeddings.to(at::kFloat).contiguous(), H5T_NATIVE_FLOAT);
    h5::write_strings(file, "names", names);
    if (tokens.defined()) write_matrix(file, "tokens", tokens.to(at::kInt).contiguous(), H5T_NATIVE_INT32);
    MERIDIAN_H5_CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw SystemError(path + ": cannot rename " + tmp + " over it");
  }
}

}  // namespace meridian::data
