// Private to ckpt: the checkpoint file's encoding, shared by the Writer (writer.cpp) and the
// Reader (reader.cpp): how a dtype is stored, how rows are grouped into checksum blocks, and the
// HDF5 selections and attributes both sides use (docs/formats.md, "Checkpoint format v1").
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "h5.h"  // src/h5/h5.h: the HDF5 RAII layer and its process-wide lock

namespace meridian::ckpt::detail {

constexpr size_t kBlockBytes = 4 << 20;  // rows per checksum block: about this many bytes

// A dtype as the file stores it: its name (attribute dtype) and the HDF5 file and memory types
// (bfloat16 and float16 as uint16).
struct TypeInfo {
  const char* name;
  hid_t file, memory;
};
TypeInfo type_info(at::ScalarType t);  // std::invalid_argument for a dtype checkpoints do not store
// The dtype named `name` (attribute dtype of `dataset` in `file`); DataError when unknown.
at::ScalarType scalar_type(const std::string& name, const std::string& file, const std::string& dataset);

// Rows of a tensor as the file stores them: dimension 0, or one row for a 0-dim tensor.
int64_t rows_of(const at::Tensor& t);
// Rows per checksum block of `t`: about kBlockBytes, at least 1.
int64_t block_rows_for(const at::Tensor& t);
std::vector<hsize_t> shape_of(const at::Tensor& t);

// A dataspace of `dims` (scalar when empty).
h5::Id create_space(const std::vector<hsize_t>& dims);
// Selects rows [first, first + count) of `space` (all of a scalar space when count > 0, none when
// count <= 0).
void select_rows(hid_t space, const std::vector<hsize_t>& dims, int64_t first, int64_t count);

// The uint32 array attribute crc32c (empty when missing on reading).
void write_u32_array_attr(hid_t obj, const std::string& name, const std::vector<uint32_t>& values);
std::vector<uint32_t> read_u32_array_attr(hid_t obj, const std::string& name);

}  // namespace meridian::ckpt::detail
