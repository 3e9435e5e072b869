// AdamW (decoupled weight decay), written here so its state is plain tensors that checkpoints can
// save and restore by parameter name and that sharded optimizers can split. One step is one
// at::_fused_adamw_ call per (weight decay, device, dtype): a single pass over each parameter's
// memory on a CPU or a GPU (Python's torch.optim.AdamW(fused=True)); it agrees with LibTorch's C++
// torch::optim::AdamW (amsgrad off) to rounding, each value computed in float32 (bf16 parameters and
// moments are rounded once, at the end). Parameters the fused kernel cannot take (another device, a
// gradient of another dtype, non-contiguous memory), or all with options.fused false, go through
// at::_foreach_ ops in torch::optim::AdamW's order, bit-identical to it on a CPU (tests/train/adamw_test.cpp).
//
// Not collective, not thread-safe. Parameters without a gradient are left alone (their step count
// does not advance), as in PyTorch.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "meridian/train/param_group.h"

namespace meridian::train {

struct AdamWOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  bool fused = true;  // false: the _foreach_ path for every parameter
};

// Tensors that one AdamW update takes together: the same weight decay, device and dtype. `steps`:
// each tensor's step count after this step's increment.
struct AdamWLists {
  double weight_decay = 0;
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs;
  std::vector<int64_t> steps;
};
// Whether at::_fused_adamw_ takes this parameter with this gradient and moments (CPU or CUDA, a
// floating dtype shared by all four, contiguous memory).
bool adamw_fusable(const at::Tensor& p, const at::Tensor& grad, const at::Tensor& exp_avg,
                   const at::Tensor& exp_avg_sq);
// One AdamW update of the lists, in place: at::_fused_adamw_ when `fused` (every tensor adamw_fusable),
// else _foreach_ ops in torch::optim::AdamW's order. train::AdamW and train::ShardedAdamW's shards
// both go through it, so their updates agree bit for bit. Not collective.
void adamw_update(AdamWLists& lists, const AdamWOptions& options, bool fused);

class AdamW {
 public:
  // State of one parameter: moments (undefined until its first step) and its step count (what
  // checkpoints store; the fused kernel is handed it as a float32 tensor made at each step).
  struct State {
    at::Tensor exp_avg, exp_avg_sq;
    int64_t step = 0;
  };

  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options);

  void set_lr(double lr) { options_.lr = lr; }
  double lr() const { return options_.lr; }
  const AdamWOptions& options() const { return options_; }
  const std::vector<ParamGroup>& groups() const { return groups_; }

  // One update of every parameter that has a gradient.
  void step();

  // Per parameter, in group order then parameter order (the flat index of groups()[g].params[i]).
  std::vector<State>& state() { return state_; }
  const std::vector<State>& state() const { return state_; }

 private:
  std::vector<ParamGroup> groups_;
  AdamWOptions options_;
  std::vector<State> state_;
};

}  // namespace meridian::train
