// Data parallelism for any torch::nn::Module: gradients reduced across ranks in buckets while
// backward is still running.
//
//   parallel::DistributedDataParallel ddp(runtime, comm, model, {});   // collective
//   for (...) {
//     auto loss = loss_fn(model->forward(x), y);
//     loss.backward();          // buckets are reduced as their gradients become ready
//     ddp.finish();             // waits, divides by world size: every rank holds the same gradients
//     optimizer.step();
//   }
//
// Construction (collective): broadcasts parameters and buffers from rank 0, after checking that
// every rank holds the same parameter list (names, shapes, dtypes; one allgather of a hash, then the
// first difference per rank in a UserError on every rank instead of a hang).
// Buckets: parameters in reverse registration order (about the order their gradients become ready
// in backward), `bucket_mb` each (the first one `first_bucket_mb`, so communication starts early),
// flat buffers reused every step. Each parameter's .grad is a view into its bucket, so autograd
// accumulates straight into the buffer; a hook after accumulation marks it ready, and a full bucket
// is all-reduced at once, asynchronously, while backward goes on. finish() launches what is left,
// waits for everything, and only then divides by the world size, in place. (zero_grad that sets
// gradients to none costs one copy per parameter the next step; zeroing in place costs nothing.
// With bf16 communication gradients are copied into bfloat16 buckets instead.)
// Not thread-safe; one backward at a time. Collectives that run inside backward on the same
// communicator (all_gather_with_grad's reduce-scatter) interleave with the bucket reductions in an
// order that depends on the graph: give them their own communicator unless every rank's graph is
// identical. After an exception between backward and finish(), rebuild the object.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "meridian/comm/communicator.h"

namespace meridian::comm {
class Runtime;
}

namespace meridian::core {
class Trace;
}

namespace meridian::parallel {

// Collective: rank 0's parameters (frozen ones too) and buffers to every rank, in place. DDP's
// constructor calls it; a data-parallel run without DDP (ZeRO) calls it before the first step.
void broadcast_module(comm::Communicator& comm, torch::nn::Module& module);

// Collective (one allreduce; none when the module has no floating-point buffer, the same on every
// rank): every floating-point buffer (BatchNorm running statistics, which each rank updates from
// its own batches) replaced by its mean over ranks, so every rank holds the same model again. The
// Trainer calls it after every step (PyTorch's DDP broadcasts rank 0's buffers instead).
void average_buffers(comm::Communicator& comm, torch::nn::Module& module);

struct DdpOptions {
  double bucket_mb = 25;                // as PyTorch DDP
  double first_bucket_mb = 1;           // a small first bucket: the last layers' gradients leave early
  bool find_unused_parameters = false;  // false: a parameter without gradient in a step is an error
  // The dtype gradients are reduced in: kFloat, or kBFloat16 / kHalf (half the bytes, as DDP's
  // bf16/fp16 compression hooks); the gradients themselves stay float32.
  at::ScalarType communication_dtype = at::kFloat;
  bool overlap = true;  // false: reduce everything in finish() (the baseline for bench ddp)
};

class DistributedDataParallel {
 public:
  // Collective. The module's parameters must be float32 and on the communicator's device kind.
  DistributedDataParallel(const comm::Runtime& runtime, comm::Communicator& comm,
                          std::shared_ptr<torch::nn::Module> module, const DdpOptions& options = {});
  ~DistributedDataParallel();

  // Gradient accumulation: while set to false, backward passes reduce nothing and gradients
  // accumulate locally; the next backward with sync on reduces the accumulated sum.
  void set_sync(bool sync);

  // Collective: after backward (with sync on). Waits for every bucket, writes the averaged
  // gradients into each parameter's .grad. Throws UserError on every rank if some rank had a
  // parameter without gradient and find_unused_parameters is off (naming the parameters).
  void finish();

  // Records bucket launches, completions and waits (optional; not owned).
  void set_trace(core::Trace* trace);

  int64_t bucket_count() const;
  double last_wait_s() const;  // time finish() waited for communication in the last step

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The global L2 norm of the parameters' gradients, in float64, as a 0-dim tensor on their device:
// nothing is read back (on a GPU the host does not wait). 0 when none has a gradient. With gradients
// already reduced (after finish) every rank computes the same value.
at::Tensor grad_norm(const std::vector<at::Tensor>& parameters);
// Scales every gradient by max_norm / (norm + 1e-6) when `norm` (grad_norm's, read) is above
// max_norm, as torch's clip_grad_norm_; NaN or infinity leave the gradients as they are (the
// caller skips such a step).
void clip_gradients(const std::vector<at::Tensor>& parameters, double norm, double max_norm);
// Both: returns the norm before (one host read).
double clip_grad_norm(const std::vector<at::Tensor>& parameters, double max_norm);

// Allgather with a matching backward, for losses over the whole global batch (contrastive, SigLIP):
// returns [world * B, ...] = every rank's `local` in rank order; in backward each rank receives the
// gradient of its own slice summed over all ranks (every rank's loss depends on every slice).
// `counts`: every rank's rows when they differ (uneven shares, train.balance; the same vector on
// every rank); empty: all ranks have as many as this one. Collective in forward and in backward.
at::Tensor all_gather_with_grad(comm::Communicator& comm, const at::Tensor& local,
                                const std::vector<int64_t>& counts = {});

}  // namespace meridian::parallel
