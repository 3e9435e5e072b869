// The file `meridian embed` writes, a retrieval index's input (docs/formats.md, "Embeddings"):
//
//   /embeddings   float32 [N, D], each row unit length
//   /names        N UTF-8 strings: the image paths (relative to the directory) or the text lines
//   /tokens       int32 [N, L], texts only: the token ids the text tower read
//   attributes on /: format = "meridian-embeddings", model (what was loaded), kind (images|texts)
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace meridian::data {

// Serial (one process). Writes <path>.tmp, then renames it over `path`: a reader sees the old file
// or the whole new one. `tokens` undefined for images. SystemError naming the path when HDF5 fails.
void write_embeddings(const std::string& path, const at::Tensor& embeddings, const std::vector<std::string>& names,
                      const at::Tensor& tokens, const std::string& model, const std::string& kind);

}  // namespace meridian::data
