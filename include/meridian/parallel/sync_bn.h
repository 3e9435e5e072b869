// Batch normalisation with statistics over every rank's batch (SyncBatchNorm): with small per-rank
// batches (detection at high resolution: 2-8 images per GPU) each rank's own mean and variance are
// noisy; this computes them over the global batch instead.
//
//   auto bn_comm = comm::make_communicator(runtime, comm::default_backend(runtime));  // collective
//   parallel::SyncBatchNorm2d bn(torch::nn::BatchNorm2dOptions(64).eps(1e-3).momentum(0.03), bn_comm.get());
//
// Training mode, forward (collective over the communicator): one allreduce of [sum, sum of squares,
// count] (float64, 2C + 1 values; counts may differ between ranks, including 0), then every rank
// normalises with the global mean and biased variance, and updates the running statistics with the
// unbiased global variance (var * n / (n - 1), n = global count) exactly as torch::nn::BatchNorm2d
// does on the concatenated batch (momentum, or the cumulative average when momentum is unset;
// num_batches_tracked counts calls). Backward (collective): one allreduce of the two per-channel
// gradient sums (sum of dy, sum of dy * x_hat), so each rank's input gradient is the gradient of the
// SUM of all ranks' losses with respect to its own input. The weight and bias gradients are this
// rank's share only (sum over its own elements); their sum over ranks is the gradient of that sum of
// losses. DDP's average of them is therefore the gradient of the mean of the ranks' losses, the same
// scaling DDP gives every other parameter: wrap the model in DDP as usual, nothing extra to reduce.
// Evaluation mode: plain BatchNorm2d with the running statistics, no communication.
//
// The communicator: its collectives run inside forward and backward, in an order that follows the
// graph, so it must not be the one DDP reduces gradients on (DDP's bucket reductions run during
// backward too, and the two orders differ). The caller creates one with comm::make_communicator
// (collective), keeps it alive as long as the module, and passes it non-owning. Every rank must call
// forward (training) and backward the same number of times in the same order: a rank that skips one
// hangs the others until the watchdog ends the job. Tensors must be on the communicator's device kind
// (CPU for MPI, CUDA for NCCL). Not thread-safe.
//
// Registered names and shapes are those of torch::nn::BatchNorm2d (parameters weight, bias; buffers
// running_mean, running_var, num_batches_tracked), so checkpoints and parameter lists do not change
// when a model switches between the two.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/options/batchnorm.h>
#include <torch/nn/pimpl.h>

#include <cstdint>

#include "meridian/comm/communicator.h"

namespace meridian::parallel {

class SyncBatchNorm2dImpl : public torch::nn::Module {
 public:
  // `comm` is not owned and must outlive the module (may be null only for a module that is never run
  // in training mode: evaluation needs no communication). std::invalid_argument for options this
  // module does not support: track_running_stats(false) (evaluation would need batch statistics),
  // num_features < 1, eps <= 0.
  SyncBatchNorm2dImpl(const torch::nn::BatchNorm2dOptions& options, comm::Communicator* comm);

  // x [B, C, H, W] (B may be 0 on some ranks in training; the global count must exceed 1, else
  // std::invalid_argument on every rank after the statistics allreduce, so no rank hangs). Float
  // tensors; bfloat16/half inputs are normalised in float32 and returned in their own dtype.
  // Training: collective (see above). Evaluation: local. std::invalid_argument for a tensor that is
  // not 4-D or whose channels differ from num_features (before any communication).
  at::Tensor forward(const at::Tensor& x);

  void reset_running_stats();  // running_mean 0, running_var 1, num_batches_tracked 0
  const torch::nn::BatchNorm2dOptions& options() const { return options_; }
  comm::Communicator* communicator() const { return comm_; }

  at::Tensor weight, bias;                                    // [C]: 1 and 0 at construction (undefined if !affine)
  at::Tensor running_mean, running_var, num_batches_tracked;  // [C], [C], scalar int64

 private:
  torch::nn::BatchNorm2dOptions options_;
  comm::Communicator* comm_;
};
TORCH_MODULE(SyncBatchNorm2d);

// The batch-normalisation core, for callers with their own parameters: returns
// (x - mean) / sqrt(var + eps) * weight + bias with mean and biased var over every rank's x (per
// channel of dim 1), as an autograd function whose backward allreduces the two gradient sums (see
// above). `weight` and `bias` may be undefined (no affine). If `stats_out` is given it receives
// [mean (C), unbiased var (C), global count (1)] in float64 (for running statistics).
// Collective in forward and backward; std::invalid_argument as forward above.
at::Tensor sync_batch_norm(comm::Communicator& comm, const at::Tensor& x, const at::Tensor& weight,
                           const at::Tensor& bias, double eps, at::Tensor* stats_out = nullptr);

}  // namespace meridian::parallel
