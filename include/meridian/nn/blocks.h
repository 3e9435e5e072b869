// The repeated layers of a model (transformer blocks, backbone stages), run through one BlockRunner
// so that two things can wrap every block without the model knowing about either:
//  * activation checkpointing (train.activation_checkpointing): a block's forward runs without
//    keeping its activations; backward runs it again (same RNG state, same autocast) and
//    back-propagates through the recomputed graph. Gradients equal those of the plain run.
//  * parameter sharding (ZeRO-3, train::ShardedAdamW): BlockHooks::before gathers a block's
//    parameters just before it runs (and again before its recomputation in backward), after()
//    frees them when no gradient graph keeps them.
//
//   // in the model's constructor, after registering each block:
//   runner_.add(block.ptr());
//   // in forward:
//   x = runner_.run(i, x, [&](const at::Tensor& h) { return block->forward(h, cos, sin); });
//
// Contract for `fn`: a pure function of its argument and of the block's own parameters; any other
// tensor it captures must not require a gradient (it would get none under checkpointing), and it is
// kept alive until backward. Not thread-safe; the Trainer's thread only.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <vector>

namespace meridian::nn {

class BlockHooks {
 public:
  virtual ~BlockHooks() = default;
  // Block `index` is about to run its forward; `recompute`: inside backward, under checkpointing.
  virtual void before(size_t index, bool recompute) = 0;
  // Block `index` has run (its output exists).
  virtual void after(size_t index, bool recompute) = 0;
};

class BlockRunner {
 public:
  using Fn = std::function<at::Tensor(const at::Tensor&)>;

  // The block modules in the order forward runs them (index = position).
  void add(std::shared_ptr<torch::nn::Module> block) { blocks_.push_back(std::move(block)); }
  const std::vector<std::shared_ptr<torch::nn::Module>>& blocks() const { return blocks_; }

  void set_hooks(BlockHooks* hooks) { hooks_ = hooks; }  // not owned; null: none
  BlockHooks* hooks() const { return hooks_; }
  void set_checkpointing(bool on) { checkpointing_ = on; }
  bool checkpointing() const { return checkpointing_; }

  // fn(x) for block `index`, with the hooks around it, checkpointed when set and grad mode is on.
  at::Tensor run(size_t index, const at::Tensor& x, const Fn& fn);

 private:
  std::vector<std::shared_ptr<torch::nn::Module>> blocks_;
  BlockHooks* hooks_ = nullptr;
  bool checkpointing_ = false;
};

}  // namespace meridian::nn
