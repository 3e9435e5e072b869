// Hugging Face-style safetensors weight files: read, write, and copy into a module.
//
// Format: an 8-byte little-endian u64 N, then N bytes of UTF-8 JSON (the header), then the data
// buffer. The header is an object: an optional "__metadata__" (string -> string) and, per tensor,
//   "<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
// with offsets in bytes relative to the start of the buffer; data is little-endian, row-major and
// contiguous. The header may end with spaces (0x20) so that the buffer starts 8-byte aligned.
// Supported dtypes: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace meridian::models {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// A tensor known by its name, shape and dtype, whose values are read only when asked: read()
// returns a CPU tensor of the stored dtype (for a file: a pread of its byte range).
struct LazyTensor {
  std::string name;
  std::vector<int64_t> shape;
  at::ScalarType dtype;
  std::function<at::Tensor()> read;
};
using LazyTensors = std::vector<LazyTensor>;

// Writes `tensors` to `path` atomically (`<path>.tmp`, flushed to disk, then renamed over `path`).
// Tensors are stored in the given order as contiguous CPU copies (any device, any strides); the
// header lists them in the same order, after "__metadata__" (written only when `metadata` is not
// empty), padded with spaces to a multiple of 8 bytes.
// std::invalid_argument (nothing written) for an undefined tensor, an unsupported dtype, an empty
// or duplicated name, or the name "__metadata__". SystemError naming the path when a write, flush
// or rename fails (the .tmp file is removed).
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads every tensor of `path` into CPU tensors of the stored dtype and shape, bit-exact, in the
// order of their data in the file (for files from save_safetensors: the order they were given in).
// The header is validated completely before any data is read. DataError "<path>: <where>: <problem>"
// (where = "header", "__metadata__" or "tensor '<name>'") when:
//   * the file is shorter than 8 bytes, or the header length exceeds the file or 100 MB;
//   * the header is not valid UTF-8 JSON, not an object, or repeats a key;
//   * "__metadata__" is not an object of strings;
//   * an entry is not an object, or lacks "dtype" (string), "shape" (array of non-negative
//     integers) or "data_offsets" (array of exactly two non-negative integers, begin <= end);
//     other fields in an entry are ignored, as the reference implementation does;
//   * the dtype is unknown, or end - begin != numel * element size;
//   * a range ends past the buffer, two ranges overlap, or the ranges leave a hole: like the
//     reference implementation, the tensors must cover the buffer exactly, from byte 0 to its end;
//   * a BOOL tensor holds a byte other than 0 or 1.
// SystemError naming the path when the file cannot be opened or read.
NamedTensors load_safetensors(const std::string& path);

// The tensors of `path` with the header validated as load_safetensors does (the same errors), no
// data read: each read() opens the file and reads that tensor's bytes alone (SystemError naming
// the path when the file went away or shrank; DataError for a bad BOOL byte).
LazyTensors open_safetensors(const std::string& path);

// The "__metadata__" of `path` (empty when absent). Validates the whole header like
// load_safetensors (same errors) but reads no tensor data.
std::map<std::string, std::string> safetensors_metadata(const std::string& path);

// Copies `tensors` into `module`'s parameters and buffers (recursive names, "0.weight",
// "encoder.ln.bias"), matched by name after `map_name` (identity when null; a mapping that returns
// "" drops that tensor). Values are converted to each target's dtype and device; no gradient is
// recorded. Every check runs before anything is copied, so on error the module is unchanged:
// DataError "<source>: load_into: <problem>" listing, in one message, the module's names that no
// tensor provides, the tensors whose (mapped) name the module does not have, two tensors mapped to
// the same name, and shape mismatches ("<name>: file [a, b] vs model [c, d]"); long lists are cut
// after 20 names with a count of the rest. `source` names where the tensors came from (a path).
void load_into(torch::nn::Module& module, const NamedTensors& tensors,
               const std::function<std::string(const std::string&)>& map_name = nullptr,
               const std::string& source = "safetensors weights");
// The same from tensors read on demand: names and shapes are checked first (nothing read), then
// each tensor is read, converted into its target and dropped, so at most one file tensor is held.
void load_into(torch::nn::Module& module, const LazyTensors& tensors,
               const std::function<std::string(const std::string&)>& map_name = nullptr,
               const std::string& source = "safetensors weights");
// load_into's checks alone (the same DataError), nothing read or copied: the module's name of each
// parameter and buffer -> the tensor that provides it. The module's tensors may be shape-only
// (nn::shape_only): only their names and shapes are used.
std::map<std::string, const LazyTensor*> match_tensors(
    torch::nn::Module& module, const LazyTensors& tensors,
    const std::function<std::string(const std::string&)>& map_name = nullptr,
    const std::string& source = "safetensors weights");

}  // namespace meridian::models
