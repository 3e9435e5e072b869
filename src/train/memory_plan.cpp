#include "meridian/train/memory_plan.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cstdio>
#include <unordered_map>
#include <utility>

#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/nn/blocks.h"
#include "meridian/ops/facts.h"

namespace meridian::train {

namespace {

std::string gib(int64_t bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "%.2f GiB", double(bytes) / double(int64_t(1) << 30));
  return text;
}

}  // namespace

std::string ZeroMemoryReport::to_string() const {
  static const char* const kStages[] = {
      "DistributedDataParallel + AdamW (optim.zero: 0)", "ZeRO-1: optimizer state sharded",
      "ZeRO-2: optimizer state and gradients sharded", "ZeRO-3: optimizer state, gradients and parameters sharded"};
  std::string s = std::string("memory per rank, closed form before activations, ") + kStages[std::clamp(stage, 0, 3)] +
                  " (" + std::to_string(world_size) + " ranks, " + std::to_string(numel) + " parameter elements, " +
                  std::to_string(shard_numel) + " per shard):\n";
  const std::string dtype = parameter_element_bytes == 4 ? "float32" : "bfloat16, float32 master shard";
  s += "  parameters       " + gib(parameter_bytes) +
       (stage == 3 ? std::string(offload ? " (the shard's device copy" : " (float32 shard") + " + gathered " +
                         std::string(parameter_element_bytes == 4 ? "float32" : "bfloat16") + " units)\n"
                   : " (" + dtype + ", replicated)\n");
  if (frozen_bytes > 0) s += "    of which frozen " + gib(frozen_bytes) + " (not trained: replicated, no state)\n";
  s += "  gradients        " + gib(gradient_bytes) + (stage >= 2 ? " (shard + units in flight)\n" : " (replicated)\n");
  s += "  optimizer state  " + gib(optimizer_bytes) + (stage >= 1 ? " (sharded)\n" : " (replicated)\n");
  s += "  work buffers     " + gib(buffer_bytes) + "\n";
  if (offload)
    s += "  total on the device " + gib(total()) + "; offloaded to host memory " + gib(host_bytes) +
         " (float32 master shard, moments and reduced gradient shard)";
  else
    s += "  total            " + gib(total());
  return s;
}

int64_t zero_bucket_piece(int64_t shard_numel, int64_t world, int64_t bucket_numel) {
  return std::max<int64_t>(1, std::min(shard_numel, bucket_numel / world));
}

int64_t zero_shard_numel(int64_t numel, int64_t world) {
  const int64_t s = (numel + world - 1) / world;
  return s > kShardAlign ? (s + kShardAlign - 1) / kShardAlign * kShardAlign : s;
}

ZeroMemoryReport ZeroMemoryReport::of(int64_t numel, int64_t world, int64_t bucket_numel, int64_t bytes) {
  ZeroMemoryReport r;
  r.stage = 1;
  r.world_size = world;
  r.numel = numel;
  r.parameter_element_bytes = bytes;
  r.shard_numel = zero_shard_numel(numel, world);
  r.largest_unit = numel;
  const int64_t s = r.shard_numel, master = bytes == 4 ? 0 : 4 * s;
  r.parameter_bytes = bytes * numel + master;
  r.gradient_bytes = bytes * numel;
  r.optimizer_bytes = 8 * s;
  // The bucket; the gradient shard; the parameter shard (float32 parameters: a copy; else the master).
  r.buffer_bytes = bytes * zero_bucket_piece(s, world, bucket_numel) * world + 4 * s + (bytes == 4 ? 4 * s : 0);
  return r;
}

ZeroMemoryReport ZeroMemoryReport::of_stage(int stage, int64_t numel, int64_t world, int64_t largest_unit,
                                            int64_t outside_blocks, int64_t bytes, bool offload) {
  if (offload && stage != 3) throw UserError("optim.offload needs optim.zero 3, got " + std::to_string(stage));
  if (stage == 1) return of(numel, world, kBucketNumel, bytes);
  ZeroMemoryReport r;
  r.stage = stage;
  r.world_size = world;
  r.numel = numel;
  r.parameter_element_bytes = bytes;
  r.shard_numel = stage == 0 ? numel : zero_shard_numel(numel, world);
  r.largest_unit = largest_unit;
  r.outside_blocks = outside_blocks;
  const int64_t s = r.shard_numel, u = largest_unit, b = bytes;
  switch (stage) {
    case 0:
      r.parameter_bytes = 4 * numel, r.gradient_bytes = 4 * numel, r.optimizer_bytes = 8 * numel;
      break;
    case 2:
      // In flight during backward: the .grad tensors of about one unit, and two units' flat buffers.
      r.parameter_bytes = b * numel + (b == 4 ? 0 : 4 * s), r.gradient_bytes = 4 * s + 3 * b * u;
      r.optimizer_bytes = 8 * s;
      r.buffer_bytes = (b == 4 ? 4 * s : 0) + b * u;  // a float32 parameter shard copy; update()'s gather of a unit
      break;
    default:
      // The float32 shard, and gathered: the units outside blocks for the whole step, a block and the
      // next one (prefetched).
      r.parameter_bytes = 4 * s + b * (outside_blocks + 2 * u);
      r.gradient_bytes = 4 * s + 3 * b * u;
      r.optimizer_bytes = 8 * s;
      if (offload) {  // the state to the host; the device keeps the shard in the parameters' dtype
        r.offload = true;
        r.host_bytes = 16 * s;
        r.parameter_bytes -= (4 - b) * s;
        r.gradient_bytes -= 4 * s;
        r.optimizer_bytes = 0;
      }
      break;
  }
  return r;
}

int64_t UnitPlan::largest_unit() const {
  int64_t largest = 0;
  for (const auto& u : units) largest = std::max(largest, u.numel);
  return largest;
}

int64_t UnitPlan::outside_blocks() const {
  int64_t outside = 0;
  for (const auto& u : units)
    if (u.block < 0) outside += u.numel;
  return outside;
}

UnitPlan plan_units(int stage, const std::vector<PlannedParam>& params, int64_t world, size_t blocks,
                    int64_t bucket_numel) {
  UnitPlan plan;
  plan.unit_of.assign(params.size(), SIZE_MAX);
  plan.slot.assign(params.size(), 0);
  auto add_unit = [&](const std::vector<size_t>& members, int block) {
    ZeroUnit u;
    u.block = block;
    u.offsets.push_back(0);
    for (size_t i : members) {
      plan.unit_of[i] = plan.units.size();
      plan.slot[i] = u.params.size();
      u.params.push_back(i);
      u.offsets.push_back(u.offsets.back() + params[i].numel);
    }
    u.numel = u.offsets.back();
    u.shard_numel = zero_shard_numel(u.numel, world);
    plan.units.push_back(std::move(u));
  };
  if (stage == 1) {  // one unit: every parameter in flat order
    std::vector<size_t> all(params.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    add_unit(all, -1);
  } else {
    // Each block's parameters in the block's order, then the rest in registration order, in units of
    // at most bucket_numel elements (a larger parameter alone).
    for (size_t b = 0; b < blocks; ++b) {
      std::vector<size_t> members;
      for (size_t i = 0; i < params.size(); ++i)
        if (params[i].block == int(b)) members.push_back(i);
      std::stable_sort(members.begin(), members.end(),
                       [&](size_t x, size_t y) { return params[x].order < params[y].order; });
      plan.block_unit.push_back(members.empty() ? -1 : int(plan.units.size()));
      if (!members.empty()) add_unit(members, int(b));
    }
    std::vector<size_t> rest;
    for (size_t i = 0; i < params.size(); ++i)
      if (plan.unit_of[i] == SIZE_MAX) rest.push_back(i);
    std::stable_sort(rest.begin(), rest.end(),
                     [&](size_t x, size_t y) { return params[x].position < params[y].position; });
    std::vector<size_t> members;
    int64_t count = 0;
    for (size_t i : rest) {
      if (!members.empty() && count + params[i].numel > bucket_numel)
        add_unit(std::exchange(members, {}), -1), count = 0;
      members.push_back(i);
      count += params[i].numel;
    }
    if (!members.empty()) add_unit(members, -1);
  }
  // Shards laid out in unit order; reductions issued last-registered unit first (about the order
  // backward completes them).
  std::vector<int64_t> last(plan.units.size(), 0);
  for (size_t u = 0; u < plan.units.size(); ++u) {
    plan.units[u].base = plan.shard_numel;
    plan.shard_numel += plan.units[u].shard_numel;
    plan.numel += plan.units[u].numel;
    for (size_t i : plan.units[u].params) last[u] = std::max(last[u], params[i].position);
    plan.reduce_order.push_back(u);
  }
  if (stage > 1)
    std::stable_sort(plan.reduce_order.begin(), plan.reduce_order.end(),
                     [&](size_t a, size_t b) { return last[a] > last[b]; });
  return plan;
}

std::vector<PlannedParam> planned_params(const std::vector<ParamGroup>& groups, nn::BlockRunner* blocks,
                                         const std::vector<at::Tensor>& registration) {
  std::vector<PlannedParam> params;
  std::unordered_map<const void*, size_t> index;  // TensorImpl -> flat index
  for (const auto& g : groups)
    for (const auto& p : g.params) {
      index[p.unsafeGetTensorImpl()] = params.size();
      params.push_back({p.numel(), -1, 0, int64_t(params.size())});
    }
  int64_t k = 0;
  for (const auto& p : registration)
    if (const auto it = index.find(p.unsafeGetTensorImpl()); it != index.end()) params[it->second].position = k++;
  if (blocks)
    for (size_t b = 0; b < blocks->blocks().size(); ++b) {
      int64_t order = 0;
      for (const auto& p : blocks->blocks()[b]->parameters()) {
        const auto it = index.find(p.unsafeGetTensorImpl());
        if (it == index.end() || params[it->second].block >= 0) continue;
        params[it->second].block = int(b);
        params[it->second].order = order++;
      }
    }
  return params;
}

ZeroMemoryReport plan_memory(int stage, const UnitPlan& plan, int64_t world, int64_t bytes, int64_t frozen_numel,
                             int64_t bucket_numel, bool offload) {
  auto r = stage == 1 && !offload ? ZeroMemoryReport::of(plan.numel, world, bucket_numel, bytes)
                                  : ZeroMemoryReport::of_stage(stage, plan.numel, world, plan.largest_unit(),
                                                               plan.outside_blocks(), bytes, offload);
  r.frozen_bytes = bytes * frozen_numel;
  r.parameter_bytes += r.frozen_bytes;
  return r;
}

void check_memory_fits(const comm::Runtime& rt, const ZeroMemoryReport& report,
                       const std::function<ZeroMemoryReport(int stage)>& of_stage, int64_t allocated) {
  // Bytes per rank a report needs beyond the parameters the task has already allocated.
  const auto beyond_allocated = [allocated](const ZeroMemoryReport& r) { return r.host_total(true) - allocated; };
  std::string mine;
  if (rt.device().is_cpu()) {
    const double more = double(beyond_allocated(report)) * rt.local_size();
    const auto memory = ops::memory_facts();
    const double gib = double(int64_t(1) << 30);
    if (memory.available >= 0 && more > memory.available) {
      std::string fits;
      for (int stage = 1; stage <= 3; ++stage) {
        const auto other = of_stage(stage);
        if (double(beyond_allocated(other)) * rt.local_size() <= 0.9 * memory.available)
          fits += fmt::format("{}optim.zero {} ({:.2f} GiB per rank)", fits.empty() ? "" : ", ", stage,
                              double(other.total()) / gib);
      }
      mine = fmt::format(
          "out of memory: optim.zero {} needs {:.2f} GiB per rank before activations (parameters {:.2f}, "
          "gradients {:.2f}, optimizer state {:.2f}, buffers {:.2f}); the {} rank(s) on {} need {:.2f} GiB more "
          "than the parameters already allocated, and {:.2f} GiB is available there{}. {}",
          report.stage, double(report.total()) / gib, double(report.parameter_bytes) / gib,
          double(report.gradient_bytes) / gib, double(report.optimizer_bytes) / gib, double(report.buffer_bytes) / gib,
          rt.local_size(), rt.host(), more / gib, memory.available / gib,
          memory.limit.empty() ? "" : " (" + memory.limit + ")",
          fits.empty() ? "No ZeRO stage fits either: use more nodes or a smaller model."
                       : "Stages that fit: " + fits + " (with train.activation_checkpointing for the activations).");
    }
  }
  for (const auto& message : rt.allgather(mine))
    if (!message.empty()) throw UserError(message);
}

}  // namespace meridian::train
