// ZeRO: AdamW with its state sharded across the data-parallel ranks, in three stages
// (optim.zero: 1, 2, 3), used INSTEAD of DistributedDataParallel:
//  1. optimizer state sharded; gradients reduce-scattered after backward from the full .grad tensors;
//  2. also gradients: each unit's gradients (a unit = a model block, see nn::BlockRunner, or a
//     bucket of the other parameters) are reduce-scattered as soon as backward has produced all of
//     them, and the .grad tensors are dropped; no full gradient is kept;
//  3. also parameters: between uses a parameter holds no data (an empty tensor); a block's unit is
//     all-gathered just before the block runs (BlockHooks::before; the next block's gather is issued
//     ahead so it overlaps with compute) and freed after it when no gradient graph keeps it (with
//     activation checkpointing, after its forward and again after its recomputation in backward;
//     without, after its gradients are reduced). Units outside blocks (embeddings, heads) are
//     gathered by gather_outside_blocks() before each forward and freed after backward.
//
//   comm = comm::make_communicator(runtime, comm::default_backend(runtime));
//   train::ShardedAdamW optimizer(groups, options, *comm);   // collective; ZeRO-1
//   for (...) {
//     model->zero_grad();
//     loss_fn(model->forward(x), y).backward();   // plain, local backward: NO DistributedDataParallel
//     optimizer.set_lr(schedule(step));
//     optimizer.step();                           // collective: reduces the gradients itself
//   }
// Stages 2 and 3 (train::Trainer does this with optim.zero: 2 or 3):
//     optimizer.gather_outside_blocks();             // stage 3 (collective); nothing otherwise
//     loss_fn(model->forward(x), y).backward();      // units reduce-scattered as they become ready
//     optimizer.end_backward();                      // collective: the rest, waited for
//     const double norm = optimizer.reduce_gradients().item<double>();  // collective
//     optimizer.update(norm > clip ? clip / (norm + 1e-6) : 1.0);  // collective
//
// The parameters must be identical on every rank before construction (same seed, a load, or a
// broadcast); the updates keep them identical.
//
// Layout: every unit u (ZeRO-1: one unit, every parameter in group order then parameter order)
// flattened into a vector of N_u elements, padded with zeros to W * S_u, S_u = ceil(N_u / W) rounded
// up to a multiple of kShardAlign (2^18 elements) when it is larger than that (a checkpoint's 1 MiB
// checksum blocks never straddle two ranks' shards). Rank r owns elements [r*S_u, (r+1)*S_u) of every
// unit. Its state (exp_avg, exp_avg_sq, the reduced gradient and, at stage 3, the float32 parameter
// itself) is the concatenation of its unit shards, unit u at [base_u, base_u + S_u); the step count
// of every parameter is kept on every rank.
//
// reduce_gradients() then update(scale), collective:
//  1. one allreduce (Max) of a per-parameter "has a gradient" flag: a parameter that no rank has a
//     gradient for is skipped, as train::AdamW does (no decay, no update, its step count stays); a
//     rank without a gradient for a parameter that another rank has contributes zeros;
//  2. the gradient reduce-scattered (Avg) into this rank's shard (stage 1 here, bucket by bucket, see
//     kBucketNumel; stages 2-3 already in backward, in a fixed unit order whatever order the units
//     became ready in, so every rank issues the same collectives); the global norm of the averaged
//     gradient from one allreduce of the shards' sums of squares (in double);
//  3. the gradient shard scaled by update()'s factor (when not 1), then AdamW on this rank's shard,
//     parameter segment by parameter segment, with exactly the operations of train::AdamW::step;
//  4. stages 1-2: allgather of the updated parameter shards, copied back into every parameter that
//     was updated (the others are not written at all); stage 3: the shard is the parameter.
// The result equals train::AdamW run on gradients averaged across ranks: the same operations per
// element, so any difference comes only from the order of the cross-rank sum (bit-identical at 2
// ranks; tests/train/zero_mpi_test.cpp). With gradient accumulation, stages 2-3 reduce every
// micro-step and add the averages (the sum in another order than DDP's: equal to rounding).
//
// Not thread-safe. Collective operations must be called by every rank of the communicator in the
// same order. Stages 2-3 also run collectives inside backward (from parameter hooks) and, at stage
// 3, inside forward (from the block hooks): every rank must run the same model graph.
// An exception inside step() (only from misuse: wrong dtype/device) leaves the object usable for
// the next step, but that step's update may have been partially applied on some ranks.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "meridian/comm/communicator.h"
#include "meridian/nn/blocks.h"
#include "meridian/train/adamw.h"
#include "meridian/train/memory_plan.h"

namespace meridian::train {

struct ZeroOptions {
  int stage = 1;                        // 1, 2 or 3 (see above)
  int64_t bucket_numel = kBucketNumel;  // see kBucketNumel (tests use small ones)
  nn::BlockRunner* blocks = nullptr;    // stages 2-3: a unit per block; its hooks are set (and unset in
                                        // the destructor). Null: units of bucket_numel only
  // Stages 2-3: every parameter in the model's registration order (units are reduced in the reverse
  // of it, about the order backward produces their gradients). Empty: the groups' order.
  std::vector<at::Tensor> registration;
  // Stage 3: the communicator of the parameter all-gathers (forward's order; the gradients follow
  // backward's). Null: the optimizer's own. Not owned.
  comm::Communicator* gather_comm = nullptr;
  // bfloat16: the parameters become bfloat16 (replicated at stages 1-2, gathered in bfloat16 at 3),
  // gradients are reduced in bfloat16, and every rank keeps the float32 master of its shard, which
  // AdamW updates (its moments and the reduced gradient in float32 too).
  at::ScalarType param_dtype = at::kFloat;
  // Stage 3 only: the float32 state of this rank (master shard, moments, reduced gradient shard) kept
  // in host memory (pinned when the parameters are on CUDA) and AdamW run there; the device keeps a
  // copy of the shard in param_dtype, the source of the gathers. Each unit's reduced gradient is
  // copied to the host as its reduction retires; update() copies the new shard back. The same
  // operations as without it (on CPU ranks bit-identical); on a GPU the device then holds 2 S (or 4 S
  // in float32) bytes of shard instead of 16 S of state.
  bool offload = false;
  // Stage 3: the parameters have shapes and no values yet (nn::shape_only, on the CPU): nothing
  // reads them, and `device` (not theirs) is where the shards live. The shards start at zero; the
  // caller writes every unit with with_each_unit(false, ...) before the first step (a published
  // checkpoint read straight into the shards: no rank holds the whole model). The reduced gradient
  // shard and the moments are allocated at their first use, after that.
  bool deferred = false;
  c10::Device device = c10::kCPU;
  // A CPU (MPI) communicator for step 1's flags, which the host computes and reads: agreeing on
  // them over it reads nothing back from a GPU. Null: the optimizer's own (on a GPU, one read per
  // step). Not owned.
  comm::Communicator* flags_comm = nullptr;
};

class ShardedAdamW : public nn::BlockHooks {
 public:
  // Collective (one small allreduce): every rank passes the same parameter list (checked: the same
  // element count and parameter count on every rank, UserError on every rank otherwise). Parameters
  // must be contiguous float32, on one device, of the communicator's kind (CPU for MPI, CUDA for NCCL);
  // UserError otherwise. `comm` must outlive this object. Allocates the buffers and the shard state;
  // stage 3 then frees every parameter's data. bucket_numel: as ZeroOptions::bucket_numel.
  ShardedAdamW(std::vector<ParamGroup> groups, const AdamWOptions& options, comm::Communicator& comm,
               int64_t bucket_numel = kBucketNumel);
  ShardedAdamW(std::vector<ParamGroup> groups, const AdamWOptions& options, comm::Communicator& comm, ZeroOptions zero);
  ~ShardedAdamW() override;
  ShardedAdamW(const ShardedAdamW&) = delete;
  ShardedAdamW& operator=(const ShardedAdamW&) = delete;

  int stage() const { return stage_; }
  // Not collective. Every rank must use the same lr in a step (as with any data-parallel optimizer).
  void set_lr(double lr) { options_.lr = lr; }
  double lr() const { return options_.lr; }
  const AdamWOptions& options() const { return options_; }
  const std::vector<ParamGroup>& groups() const { return groups_; }

  // Collective: end_backward() (stages 2-3), reduce_gradients(), update(1.0).
  void step() {
    end_backward();
    reduce_gradients();
    update(1.0);
  }
  // Stage 3, collective (allgathers): the units outside blocks gathered into their parameters, for a
  // forward (training or evaluation). Nothing at stages 1-2.
  void gather_outside_blocks();
  // Stage 3, not collective: every gathered unit freed (after an evaluation).
  void release_all();
  // Stages 2-3, collective: after each backward (every micro-step), the units backward did not
  // complete are reduced too (zeros for parameters without gradient), every reduction is waited
  // for and added to the gradient shard, and the .grad tensors are dropped. Nothing at stage 1.
  void end_backward();
  // Collective, steps 1 and 2 (allreduce, stage 1's reduce_scatter, allreduce of one double):
  // returns the L2 norm of the gradient averaged over ranks as a 0-dim float64 tensor on the
  // shards' device, not read back (the same value on every rank; 0 when no rank has any gradient;
  // NaN/Inf when a gradient is not finite). .grad tensors are only read.
  at::Tensor reduce_gradients();
  // Collective, steps 3 and 4 (allgather at stages 1-2): AdamW on the last reduce_gradients()'
  // shard multiplied by grad_scale (every rank passes the same value). Skip it on every rank to
  // drop the step.
  void update(double grad_scale = 1.0);

  // Not collective: sizes of this rank (the same on every rank).
  ZeroMemoryReport memory_report() const;
  bool offloaded() const { return offload_; }

  // nn::BlockHooks (stage 3 gathers and frees; nothing at stages 1-2).
  void before(size_t block, bool recompute) override;
  void after(size_t block, bool recompute) override;

  // --- For checkpoints (not collective unless said) ---
  int64_t world_size() const { return world_; }
  int64_t rank() const { return rank_; }
  int64_t numel() const { return numel_; }  // N
  const std::vector<ZeroUnit>& units() const { return plan_.units; }
  // Stage 1 (one unit): the padded flat vector and this rank's range of it.
  int64_t padded_numel() const { return shard_numel_ * world_; }    // N_pad
  int64_t shard_numel() const { return shard_numel_; }              // S (all units)
  int64_t shard_begin() const { return rank_ * shard_numel_; }      // stage 1: this rank owns [begin, end)
  int64_t shard_end() const { return (rank_ + 1) * shard_numel_; }  // of the padded flat vector
  // Offset of parameter i (flat index, group order then parameter order) in the flat vector; the
  // vector has one more entry, N, so parameter i spans [offsets()[i], offsets()[i+1]).
  const std::vector<int64_t>& offsets() const { return offsets_; }
  // This rank's moments, S float32 elements each on the parameters' device (host memory when
  // offloaded()); element base_u + k
  // belongs to element r * S_u + k of unit u (padding elements stay zero). Writable in place.
  at::Tensor& exp_avg_shard() { return allocate_state(), exp_avg_; }
  at::Tensor& exp_avg_sq_shard() { return allocate_state(), exp_avg_sq_; }
  // This rank's float32 parameter shards, laid out as the moments: the parameters themselves when
  // owns_master() (stage 3, or bfloat16 parameters), else a copy made by update().
  at::Tensor& parameter_shard() { return param_shard_; }
  bool owns_master() const { return master_; }
  // Step count per parameter (flat index), identical on every rank. Writable (a restore).
  std::vector<int64_t>& steps() { return steps_; }
  const std::vector<int64_t>& steps() const { return steps_; }
  // Collective when owns_master(): for each unit in order, fn(unit, tensors) with one float32 tensor
  // per parameter of the unit (in unit order, the parameters' shapes): `gather`: their values (the
  // masters all-gathered, one unit at a time), to write; else zeros for fn to fill (a load): then this
  // rank's master shard and, at stages 1-2, the parameters are set from them. Without a master the
  // tensors are the float32 parameters themselves.
  void with_each_unit(bool gather, const std::function<void(const ZeroUnit&, const std::vector<at::Tensor>&)>& fn);

 private:
  struct Param {
    at::Tensor tensor;
    double weight_decay;
    std::vector<int64_t> shape;
  };
  struct UnitState;  // per-step state of a unit (gathers, gradient buffer, reduction in flight)
  std::vector<ParamGroup> groups_;
  comm::Communicator* flags_comm_ = nullptr;  // ZeroOptions::flags_comm
  AdamWOptions options_;
  comm::Communicator& comm_;
  comm::Communicator* gather_comm_ = nullptr;
  int stage_ = 1;
  bool master_ = false;           // the float32 parameter shard is the master (stage 3, or bfloat16 parameters)
  bool offload_ = false;          // ZeroOptions::offload
  std::vector<Param> params_;     // flat index order
  std::vector<int64_t> offsets_;  // size params_.size() + 1
  std::vector<int64_t> steps_;
  UnitPlan plan_;                   // the units (memory_plan.h)
  std::vector<UnitState> state_;    // parallel to plan_.units
  std::vector<unsigned> hook_ids_;  // per parameter (stages 2-3)
  nn::BlockRunner* blocks_ = nullptr;
  int64_t world_ = 1, rank_ = 0, numel_ = 0, shard_numel_ = 0;
  int64_t micro_ = 0;           // backwards ended since the last reduce_gradients()
  size_t next_reduce_ = 0;      // position in reduce_order_ of the next reduction to issue
  std::vector<size_t> stale_;   // parameters whose .grad autograd sets after their unit was reduced
  std::vector<char> has_grad_;  // stages 2-3: parameters that got a gradient since reduce_gradients()
  // Calls f(parameter i, offset in the range, offset in the parameter, count) for every parameter
  // of unit u overlapping its range [begin, begin + count) (clipped to N_u).
  template <typename F>
  void for_each_segment(const ZeroUnit& u, int64_t begin, int64_t count, F&& f) const;
  void build_units(const ZeroOptions& zero);
  void on_gradient(size_t param, const at::Tensor& grad);
  void issue_ready_reductions();
  void retire(size_t unit);               // waits for its reduction, adds it, frees its buffers
  void retire_reductions(bool all);       // the completed ones in issue order (all: every one)
  static constexpr size_t kInFlight = 2;  // gradient reductions in flight at most
  std::vector<size_t> in_flight_;         // units whose reduction is issued, oldest first
  void release_due_units();               // the units whose release waited for autograd's last gradient
  // The parameters' shapes as views of a unit's flat vector (W * S_u elements).
  std::vector<at::Tensor> unit_views(const ZeroUnit& unit, const at::Tensor& flat) const;
  void gather(size_t unit);
  void materialize(size_t unit);
  void release(size_t unit);
  int64_t bucket_numel_ = kBucketNumel;
  int64_t piece_ = 1;                        // C: elements per rank and bucket (stage 1)
  at::TensorOptions options_f_, options_p_;  // float32; the parameters' (and gradient collectives') dtype
  at::TensorOptions options_s_;              // the float32 state: options_f_, or host memory when offloaded
  at::Tensor bucket_;                        // stage 1: W * C, a bucket of gradients, then of gathered parameters
  at::Tensor grad_shard_, param_shard_, exp_avg_, exp_avg_sq_;  // S each (options_s_)
  at::Tensor device_shard_;  // offloaded: the shard in the parameters' dtype on their device (S)
  // Unit u's slice of the shard on the parameters' device in `dtype` (a view or a copy).
  at::Tensor shard_on_device(const ZeroUnit& unit, at::ScalarType dtype) const;
  // The reduced gradient shard and the moments, zeros, unless allocated already: in the constructor,
  // or at their first use when ZeroOptions::deferred.
  void allocate_state();
  at::Tensor flags_;       // one float per parameter: has a gradient
  std::vector<char> any_;  // reduce_gradients(): parameters some rank has a gradient for
};

}  // namespace meridian::train
