// ZeRO-1: AdamW with its optimizer state sharded across the data-parallel ranks.
//
//   comm = comm::make_communicator(runtime, comm::default_backend(runtime));
//   train::ShardedAdamW optimizer(groups, options, *comm);   // collective
//   log(optimizer.memory_report().to_string());
//   for (...) {
//     model->zero_grad();
//     loss_fn(model->forward(x), y).backward();   // plain, local backward: NO DistributedDataParallel
//     optimizer.set_lr(schedule(step));
//     optimizer.step();                           // collective: reduces the gradients itself
//   }
// or, with clipping by the global gradient norm (train::Trainer does this with optim.zero: true):
//     const double norm = optimizer.reduce_gradients();           // collective
//     optimizer.update(norm > clip ? clip / (norm + 1e-6) : 1.0);  // collective
//
// Use it INSTEAD of DistributedDataParallel (do not wrap the model, do not call ddp.finish()):
// step() averages the gradients across ranks itself, with a reduce-scatter that leaves each rank
// only the averaged gradient of its own shard. The parameters must be identical on every rank
// before the first step (same seed, a load, or a broadcast); step() keeps them identical.
//
// Layout: every parameter (float32, all on one device, the communicator's device kind) flattened in
// group order then parameter order into one logical vector of N elements, padded with zeros to
// N_pad = W * S, W the communicator's size, S = ceil(N / W) rounded up to a multiple of
// kShardAlign (2^18 elements) when it is larger than that, so that a checkpoint's 1 MiB checksum
// blocks never straddle two ranks' shards. Rank r owns elements [r*S, (r+1)*S)
// (the last rank's range may end in the padding, and for tiny N a rank may own padding only). It
// holds exp_avg and exp_avg_sq (float32) for those S elements only, and the step count of every
// parameter (identical on all ranks).
//
// step() = reduce_gradients() (1, 2) then update(1.0) (3, 4), collective:
//  1. one allreduce (Max) of a per-parameter "has a gradient" flag: a parameter that no rank has a
//     gradient for is skipped, as train::AdamW does (no decay, no update, its step count stays); a
//     rank without a gradient for a parameter that another rank has contributes zeros;
//  2. the flat gradient (every .grad) reduce-scattered (Avg) into this rank's shard, one bucket at a
//     time (see kBucketNumel); the
//     global norm of the averaged gradient from one allreduce of the shards' sums of squares;
//  3. the gradient shard scaled by update()'s factor (when not 1), then AdamW on this rank's shard, parameter segment
//  by parameter segment, with exactly the
//     operations of train::AdamW::step (its group's weight decay, its own step count and bias
//     corrections) applied to the slices of the parameter/moment/gradient shards;
//  4. allgather of the updated parameter shards, bucket by bucket, copied back into every
//     parameter that was updated (the others are not written at all).
// The result equals train::AdamW run on gradients averaged across ranks: the same operations per
// element, so any difference comes only from the order of the cross-rank sum (tests/train/
// zero_mpi_test.cpp). .grad tensors are read, never modified.
//
// Memory: besides the model's parameters and gradients, one bucket buffer of W * C floats (about
// 64 MiB; gradients, then gathered parameters) and two of S (gradient shard, parameter shard), plus
// the 2 * S of state.
//
// Not thread-safe. Collective operations must be called by every rank of the communicator in the
// same order (they use it blocking, from the calling thread; no Work is left pending on return).
// An exception inside step() (only from misuse: wrong dtype/device) leaves the object usable for
// the next step, but that step's update may have been partially applied on some ranks.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "meridian/comm/communicator.h"
#include "meridian/train/adamw.h"

namespace meridian::train {

// Shards longer than this many elements are a multiple of it (see Layout above).
constexpr int64_t kShardAlign = int64_t(1) << 18;

// Collectives go bucket by bucket: W pieces of C = min(S, kBucketNumel / W) elements each (piece k
// of every rank's shard), so the work buffer is about kBucketNumel floats (64 MiB), whatever N is.
constexpr int64_t kBucketNumel = int64_t(1) << 24;
// Bytes per rank, with and without sharding the optimizer state. ZeRO-1 shards only the optimizer
// state: parameters and gradients are replicated on every rank either way.
struct ZeroMemoryReport {
  int64_t world_size = 1;
  int64_t numel = 0;                      // N: parameter elements
  int64_t shard_numel = 0;                // S = ceil(N / W)
  int64_t parameter_bytes = 0;            // 4 N
  int64_t gradient_bytes = 0;             // 4 N (the .grad tensors)
  int64_t optimizer_bytes_unsharded = 0;  // 8 N: exp_avg + exp_avg_sq for every element (train::AdamW)
  int64_t optimizer_bytes_sharded = 0;    // 8 S: the same for this rank's shard only
  int64_t buffer_bytes = 0;               // ShardedAdamW's work buffers: 4 (W C + 2 S), C the bucket piece
  int64_t total_unsharded() const { return parameter_bytes + gradient_bytes + optimizer_bytes_unsharded; }
  int64_t total_sharded() const { return parameter_bytes + gradient_bytes + optimizer_bytes_sharded + buffer_bytes; }
  // One line per figure, for the log at start ("parameters 1.2 GiB, ...").
  std::string to_string() const;
  // The figures for N parameter elements over W ranks (the same as ShardedAdamW::memory_report()).
  static ZeroMemoryReport of(int64_t numel, int64_t world_size, int64_t bucket_numel = kBucketNumel);
};

// S for N elements over W ranks (see Layout above).
int64_t zero_shard_numel(int64_t numel, int64_t world_size);
int64_t zero_bucket_piece(int64_t shard_numel, int64_t world_size, int64_t bucket_numel = kBucketNumel);

class ShardedAdamW {
 public:
  // Collective (one small allreduce): every rank passes the same parameter list (checked: the same
  // element count and parameter count on every rank, UserError on every rank otherwise). Parameters
  // must be contiguous float32, on one device, of the communicator's kind (CPU for MPI, CUDA for NCCL);
  // UserError otherwise. `comm` must outlive this object. Allocates the buffers and the shard state.
  // bucket_numel: elements per bucket collective (tests use small ones).
  ShardedAdamW(std::vector<ParamGroup> groups, const AdamWOptions& options, comm::Communicator& comm,
               int64_t bucket_numel = kBucketNumel);

  // Not collective. Every rank must use the same lr in a step (as with any data-parallel optimizer).
  void set_lr(double lr) { options_.lr = lr; }
  double lr() const { return options_.lr; }
  const AdamWOptions& options() const { return options_; }
  const std::vector<ParamGroup>& groups() const { return groups_; }

  // Collective (allreduce of the flags, reduce_scatter, allgather; blocking, on the calling
  // thread). Call after a plain local backward on every rank, never after DDP's finish(): see
  // above. Every rank returns with the same updated parameters.
  void step() {
    reduce_gradients();
    update(1.0);
  }
  // Collective, steps 1 and 2 (allreduce, reduce_scatter, allreduce of one double): returns the
  // L2 norm of the gradient averaged over ranks (the same value on every rank; 0 when no rank has
  // any gradient; NaN/Inf when a gradient is not finite). .grad tensors are only read.
  double reduce_gradients();
  // Collective, steps 3 and 4 (allgather): AdamW on the last reduce_gradients()' shard multiplied
  // by grad_scale (every rank passes the same value). Skip it on every rank to drop the step.
  void update(double grad_scale = 1.0);

  // Not collective: sizes of this rank (the same on every rank).
  ZeroMemoryReport memory_report() const;

  // --- For checkpoints (not collective) ---
  int64_t world_size() const { return world_; }
  int64_t rank() const { return rank_; }
  int64_t numel() const { return numel_; }                          // N
  int64_t padded_numel() const { return shard_numel_ * world_; }    // N_pad
  int64_t shard_numel() const { return shard_numel_; }              // S
  int64_t shard_begin() const { return rank_ * shard_numel_; }      // this rank owns [begin, end) of the
  int64_t shard_end() const { return (rank_ + 1) * shard_numel_; }  // padded flat vector
  // Offset of parameter i (flat index, group order then parameter order) in the flat vector; the
  // vector has one more entry, N, so parameter i spans [offsets()[i], offsets()[i+1]).
  const std::vector<int64_t>& offsets() const { return offsets_; }
  // This rank's moments, S float32 elements each on the parameters' device; element k belongs to
  // flat index shard_begin() + k (padding elements stay zero). Writable in place (a restore).
  at::Tensor& exp_avg_shard() { return exp_avg_; }
  at::Tensor& exp_avg_sq_shard() { return exp_avg_sq_; }
  // Step count per parameter (flat index), identical on every rank. Writable (a restore).
  std::vector<int64_t>& steps() { return steps_; }
  const std::vector<int64_t>& steps() const { return steps_; }

 private:
  struct Param {
    at::Tensor tensor;
    double weight_decay;
  };
  std::vector<ParamGroup> groups_;
  AdamWOptions options_;
  comm::Communicator& comm_;
  std::vector<Param> params_;     // flat index order
  std::vector<int64_t> offsets_;  // size params_.size() + 1
  std::vector<int64_t> steps_;
  int64_t world_ = 1, rank_ = 0, numel_ = 0, shard_numel_ = 0;
  // Calls f(parameter i, offset in the range, offset in the parameter, count) for every parameter
  // overlapping flat range [begin, begin + count) (clipped to N).
  template <typename F>
  void for_each_segment(int64_t begin, int64_t count, F&& f) const;
  int64_t bucket_numel_ = kBucketNumel;
  int64_t piece_ = 1;  // C: elements per rank and bucket
  at::Tensor bucket_;  // W * C: a bucket of gradients, then of gathered parameters
  at::Tensor grad_shard_, param_shard_, exp_avg_, exp_avg_sq_;  // S each
  at::Tensor flags_;                                            // one float per parameter: has a gradient
  std::vector<char> any_;  // reduce_gradients(): parameters some rank has a gradient for
};

}  // namespace meridian::train
