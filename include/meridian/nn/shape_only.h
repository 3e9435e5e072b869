// Tensors with a shape and no memory. A model built for its shapes alone, whose values are written
// later where they are kept: a published checkpoint read straight into ZeRO-3's shards
// (tasks::LmTask with train --init DIR), so no rank ever holds the whole model.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <cstdint>

namespace meridian::nn {

// A contiguous CPU tensor of `sizes` and `dtype` over a read-only anonymous mapping of its size:
// no resident memory (the pages are never touched), reads give zeros, any write faults (SIGSEGV), so
// only code that replaces the tensor's data may hold it. Not collective; SystemError when the
// mapping fails. An empty shape gives an ordinary empty tensor.
at::Tensor shape_only(at::IntArrayRef sizes, at::ScalarType dtype);

// Replaces the data of every parameter of `module` (recursively) by shape_only of its shape and
// dtype, freeing what it held (and returning the freed heap pages to the system); requires_grad and
// the names are kept.
void drop_parameter_values(torch::nn::Module& module);

}  // namespace meridian::nn
