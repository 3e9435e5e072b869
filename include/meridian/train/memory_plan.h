// ZeRO's memory plan: how the trained parameters are grouped into units (what ZeRO-2/3 reduce,
// gather and free together), and the closed-form bytes per rank that follow from the units. One
// plan_units() serves train::ShardedAdamW (its real layout), the Trainer's out-of-memory check and
// `meridian bench memory` (tasks::lm_memory), so their figures cannot differ. Not collective,
// except check_memory_fits().
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "meridian/train/param_group.h"

namespace meridian::comm {
class Runtime;
}
namespace meridian::nn {
class BlockRunner;
}

namespace meridian::train {

// Shards longer than this many elements are a multiple of it (see Layout above).
constexpr int64_t kShardAlign = int64_t(1) << 18;

// Stage 1 collectives go bucket by bucket: W pieces of C = min(S, kBucketNumel / W) elements each
// (piece k of every rank's shard), so the work buffer is about kBucketNumel floats (64 MiB). Stages
// 2-3: parameters outside blocks form units of at most this many elements (one larger parameter
// is a unit alone).
constexpr int64_t kBucketNumel = int64_t(1) << 24;

// Bytes per rank of each stage, closed form, before activations (float32 parameters, gradients and
// moments). U: the largest unit, R: the elements outside blocks.
struct ZeroMemoryReport {
  int stage = 1;  // 0: DistributedDataParallel + AdamW
  int64_t world_size = 1;
  int64_t numel = 0;        // N: parameter elements
  int64_t shard_numel = 0;  // S: this rank's elements over all units (about N / W)
  int64_t largest_unit = 0, outside_blocks = 0;
  int64_t parameter_element_bytes = 4;  // 4: float32 parameters; 2: bfloat16 (with a float32 master shard)
  int64_t parameter_bytes = 0;  // 0, 1, 2: 4 N (replicated); 3: 4 S (the shard) + gathered units; + frozen_bytes
  int64_t frozen_bytes = 0;     // parameters not trained (LoRA's base weights), replicated, not in N
  int64_t gradient_bytes = 0;   // 0, 1: 4 N (the .grad tensors); 2, 3: 4 S (the reduced shard) + in flight
  int64_t optimizer_bytes = 0;  // 0: 8 N; 1-3: 8 S (exp_avg + exp_avg_sq)
  int64_t buffer_bytes = 0;     // work buffers and transient copies (stage 1: 4 (W C + 2 S))
  bool offload = false;         // stage 3 with optim.offload: the float32 state in host memory
  int64_t host_bytes = 0;       // offload: 16 S (master, moments, reduced gradient), not in the four above
  // On the parameters' device (with offload, what stays on it).
  int64_t total() const { return parameter_bytes + gradient_bytes + optimizer_bytes + buffer_bytes; }
  // In host memory: everything on CPU ranks, the offloaded state on GPU ranks.
  int64_t host_total(bool cpu) const { return cpu ? total() + host_bytes : host_bytes; }
  // One line per figure, for the log at start ("parameters 1.2 GiB, ...").
  std::string to_string() const;
  // Stage 1's figures for N elements over W ranks (ShardedAdamW::memory_report() of a ZeRO-1 object).
  static ZeroMemoryReport of(int64_t numel, int64_t world_size, int64_t bucket_numel = kBucketNumel,
                             int64_t parameter_element_bytes = 4);
  // Any stage (0: DDP + AdamW, float32 only) for a model of N elements in units of at most
  // `largest_unit` elements (blocks), `outside_blocks` of them outside any block.
  // offload (stage 3 only): the state in host memory (host_bytes), the shard in the parameters' dtype
  // on the device.
  static ZeroMemoryReport of_stage(int stage, int64_t numel, int64_t world_size, int64_t largest_unit,
                                   int64_t outside_blocks, int64_t parameter_element_bytes = 4, bool offload = false);
};

// S for N elements over W ranks (see Layout above).
int64_t zero_shard_numel(int64_t numel, int64_t world_size);
int64_t zero_bucket_piece(int64_t shard_numel, int64_t world_size, int64_t bucket_numel = kBucketNumel);

// A unit of the layout: parameters reduced (and, at stage 3, gathered) together.
struct ZeroUnit {
  std::vector<size_t> params;    // flat parameter indices (group order), in unit order
  std::vector<int64_t> offsets;  // params.size() + 1 offsets in the unit's vector
  int64_t numel = 0, shard_numel = 0, base = 0;
  int block = -1;  // the block it belongs to, -1 outside blocks
};

// A trained parameter as the plan sees it (only sizes and places matter).
struct PlannedParam {
  int64_t numel = 0;
  int block = -1;        // the (first) block it belongs to; -1: outside every block
  int64_t order = 0;     // within its block: its position in the block's parameters()
  int64_t position = 0;  // its registration position in the model (units outside blocks follow it, and
                         // reductions are issued in the reverse of it)
};

// The units of one stage; parameters are named by their index in the list given to plan_units()
// (the optimizer's flat order: group order, then parameter order).
struct UnitPlan {
  std::vector<ZeroUnit> units;         // stage 1: one unit, every parameter; else the blocks' units in block
                                       // order, then the rest in registration order, bucket_numel at most each
                                       // (a larger parameter alone)
  std::vector<size_t> reduce_order;    // units in the order their reductions are issued (last registered first)
  std::vector<int> block_unit;         // per block: its unit (-1: a block without trained parameters)
  std::vector<size_t> unit_of, slot;   // per parameter: its unit and its position in it
  int64_t numel = 0, shard_numel = 0;  // N and S (the sum of the units' S_u)
  int64_t largest_unit() const;
  int64_t outside_blocks() const;  // elements in units outside blocks
};

UnitPlan plan_units(int stage, const std::vector<PlannedParam>& params, int64_t world_size, size_t blocks,
                    int64_t bucket_numel = kBucketNumel);

// The parameters of `groups` (flat order) as the plan sees them: their blocks in `blocks` (null:
// none) and their positions in `registration` (every parameter of the model in registration order;
// empty: the flat order).
std::vector<PlannedParam> planned_params(const std::vector<ParamGroup>& groups, nn::BlockRunner* blocks,
                                         const std::vector<at::Tensor>& registration);

// Bytes per rank of `stage` (0: DistributedDataParallel + AdamW) for the units of `plan`, with
// parameters of `parameter_element_bytes` (4: float32; 2: bfloat16 with float32 master shards) and
// `frozen_numel` frozen elements replicated beside them; offload: as of_stage's.
ZeroMemoryReport plan_memory(int stage, const UnitPlan& plan, int64_t world_size, int64_t parameter_element_bytes,
                             int64_t frozen_numel = 0, int64_t bucket_numel = kBucketNumel, bool offload = false);

// Collective (an allgather of messages): on CPU ranks, a run whose `memory` cannot fit beside the
// `allocated` bytes of parameters the model already holds (0 when built shape-only), times the
// ranks on the node, in the node's MemAvailable is
// refused with a UserError on every rank, before anything is allocated (instead of the kernel
// killing one rank at the first step). `of_stage(k)` gives the other stages' figures, to name the
// ones that fit. On CUDA a failed allocation is an exception: nothing is checked.
void check_memory_fits(const comm::Runtime& runtime, const ZeroMemoryReport& memory,
                       const std::function<ZeroMemoryReport(int stage)>& of_stage, int64_t allocated);

}  // namespace meridian::train
