// Trained parameters that share a weight decay: what the optimizers, the strategies and the memory
// plan take.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

namespace meridian::train {

struct ParamGroup {
  std::vector<at::Tensor> params;
  double weight_decay = 0;
  std::vector<std::string> names;  // optional, parallel to params (checkpoints store state by name)
};

}  // namespace meridian::train
