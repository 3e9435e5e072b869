// SGD with momentum (optionally Nesterov) and coupled weight decay, written here so its state is
// plain tensors that checkpoints can save and restore by parameter name. Bit-identical to LibTorch's
// C++ torch::optim::SGD (the same operations in the same order; tests/train/sgd_test.cpp compares
// them), also when lr and momentum change between steps:
//
//   g = grad + weight_decay * p                         (when the group's weight_decay != 0)
//   momentum != 0: buf = clone(g) at a parameter's first step with momentum, else
//                  buf = buf * momentum + (1 - dampening) * g;
//                  g = nesterov ? g + momentum * buf : buf
//   p -= lr * g
//
// Not collective, not thread-safe. Parameters without a gradient are left alone (their step count
// does not advance), as in PyTorch.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "meridian/train/adamw.h"

namespace meridian::train {

struct SGDOptions {
  double lr = 1e-2;
  double momentum = 0;
  bool nesterov = false;  // requires momentum > 0 and dampening 0 (std::invalid_argument otherwise)
  double dampening = 0;
};

class SGD {
 public:
  // State of one parameter: the momentum buffer (undefined until its first step with momentum) and
  // its step count (updates applied).
  struct State {
    at::Tensor momentum_buffer;
    int64_t step = 0;
  };

  // std::invalid_argument for lr < 0, momentum or dampening outside [0, 1), or nesterov without
  // momentum > 0 and dampening 0.
  SGD(std::vector<ParamGroup> groups, const SGDOptions& options);

  void set_lr(double lr) { options_.lr = lr, bias_lr_ = -1; }
  // `lr` for every parameter but the biases (named "<...>.bias", one dimension), which take
  // `bias_lr` (Ultralytics' warmup_bias_lr); bias_lr < 0: they take `lr` too.
  void set_lr(double lr, double bias_lr) { options_.lr = lr, bias_lr_ = bias_lr; }
  double lr() const { return options_.lr; }
  // The momentum of the next step(); the buffers keep their contents (as setting a torch group's
  // momentum does). std::invalid_argument outside [0, 1), or 0 with nesterov.
  void set_momentum(double momentum);
  double momentum() const { return options_.momentum; }
  const SGDOptions& options() const { return options_; }
  const std::vector<ParamGroup>& groups() const { return groups_; }

  // One update of every parameter that has a gradient.
  void step();

  // Per parameter, in group order then parameter order (the flat index of groups()[g].params[i]).
  std::vector<State>& state() { return state_; }
  const std::vector<State>& state() const { return state_; }

 private:
  std::vector<ParamGroup> groups_;
  std::vector<char> is_bias_;  // per parameter, flat as state_
  double bias_lr_ = -1;
  SGDOptions options_;
  std::vector<State> state_;
};

}  // namespace meridian::train
