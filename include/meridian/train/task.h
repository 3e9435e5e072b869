// What a workload gives the generic training loop (train::Trainer): a model, its data, how one
// batch becomes a loss, and how the model is evaluated. The workloads are tasks::SiglipTask
// (image-text), tasks::DetectTask (YOLO-style detection) and tasks::LmTask (Llama-style SFT), found
// by name in tasks/registry.h.
//
// The Trainer owns everything around the task: devices, the data-parallel engine, the optimizer,
// the learning-rate schedule, mixed precision, the NaN/Inf guard, logging, metrics files,
// evaluation cadence and checkpoint hooks. A task never calls backward() or steps an optimizer.
//
// Threading and collectives: the Trainer calls every method from one thread, on every rank, in the
// same order. Methods marked collective may run collectives on the task's own communicators (never
// on the Trainer's gradient communicator, whose order is set by backward).
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "meridian/nn/blocks.h"

namespace meridian::train {

class Strategy;

// Where the training data stands: global samples consumed in `epoch` (data::DistributedSampler's
// position), as checkpoints store it.
struct DataPosition {
  int64_t epoch = 0, position = 0;
};

// Named values in a fixed order (printed, written to metrics.csv and TensorBoard in that order).
using Metrics = std::vector<std::pair<std::string, double>>;

class Task {
 public:
  virtual ~Task() = default;

  virtual std::string name() const = 0;
  // The module whose parameters are trained (float32, on the runtime's device).
  virtual std::shared_ptr<torch::nn::Module> model() = 0;
  // Samples this rank consumes per forward (its micro-batch).
  virtual int64_t batch_size() const = 0;
  // Forward FLOPs of one sample (2 x multiply-adds); the Trainer reports model FLOP/s from it.
  virtual double flops_per_sample() const = 0;
  // Tokens in one sample, for language models (the Trainer then reports tokens/s); 0: not a token
  // workload.
  virtual double tokens_per_sample() const { return 0; }
  // Not collective. Blocks until this rank's next batch is ready and moves it to the device; the
  // Trainer counts the time as data wait.
  virtual void next_batch() = 0;
  // Not collective. The dataset rows of the batch next_batch() took, in its order (train.record_samples):
  // a host int64 [B] tensor; undefined: the task does not know them.
  virtual at::Tensor batch_rows() const { return {}; }
  // Not collective; every rank passes the same shares, between steps (train.balance). From the
  // next batch on, this rank's part of each global micro-batch (batch_size() x ranks samples) is
  // shares[rank] samples; the shares sum to the global micro-batch; empty: batch_size() each.
  // forward() keeps its contract under any shares. Default: std::logic_error (a task that cannot
  // split its batches unevenly).
  virtual void set_shares(const std::vector<int64_t>& shares);
  // Collective when the loss spans ranks. Forward on the current batch: a scalar float32 loss whose
  // mean over ranks is the objective (so averaged gradients are the objective's gradients), also
  // when the ranks' shares differ: a rank normalises by global counts (samples, tokens), not its own.
  // Runs under autocast when the Trainer's precision asks for it.
  virtual at::Tensor forward() = 0;
  // Whether AdamW's weight decay applies to a parameter (by its name in model()->named_parameters()).
  // Default: matrices and convolution kernels decay; biases, norms and scalars do not.
  virtual bool decays(const std::string& name, const at::Tensor& parameter) const { return parameter.dim() >= 2; }
  // Collective. Evaluates the model (in eval mode, without gradients); every rank returns the same
  // metrics. Empty when the task has nothing to evaluate (e.g. no evaluation data configured).
  virtual Metrics evaluate() { return {}; }
  // After the batches consumed so far (checkpoints save it; the task is built at it on resume).
  virtual DataPosition data_position() const { return {}; }
  // Global batches (train.batch x ranks samples) in one epoch of the training data, as its sampler
  // counts them (train.epochs turns into steps with it); 0: unknown.
  virtual int64_t batches_per_epoch() const { return 0; }
  // The model's repeated blocks (activation checkpointing, ZeRO-3's units); null: none.
  virtual nn::BlockRunner* blocks() { return nullptr; }
  // Values worth logging next to the loss (e.g. the SigLIP temperature); not collective. Called on
  // rank 0 at the logged steps only: keep them on the device until then (a read here is a host wait
  // on a GPU, not one per step).
  virtual Metrics step_metrics() { return {}; }
  // True when model() was built with shape-only parameters (nn::shape_only: no values, on the CPU)
  // because the values are read straight into the strategy's shards (only with optim.zero 3: the
  // strategy then neither broadcasts nor reads them). The same on every rank.
  virtual bool defers_weights() const { return false; }
  // Collective, once, after the strategy is built and before the first step: a task that
  // defers_weights() writes every trained parameter through strategy.assign(), unless a checkpoint's
  // restore (Strategy::load) will write them. Default: nothing.
  virtual void assign_weights(Strategy& strategy) {}
};

}  // namespace meridian::train
