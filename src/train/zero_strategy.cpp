// ZeRO-1/2/3 as a train::Strategy: train::ShardedAdamW reduces the gradients itself (no
// DistributedDataParallel) and owns the layout of its shards in checkpoints.
#include <spdlog/fmt/fmt.h>

#include <algorithm>

#include "adamw_state.h"
#include "meridian/comm/runtime.h"
#include "meridian/parallel/ddp.h"
#include "meridian/train/strategy.h"
#include "meridian/train/strategy_plan.h"
#include "strategies.h"

namespace meridian::train {

ZeroAdamW::ZeroAdamW(const comm::Runtime& rt, comm::Communicator& comm, Task& task, std::vector<ParamGroup> groups,
                     const TrainerSettings& s, const ZeroMemoryReport& memory)
    : Strategy(std::move(groups)), s_(s), memory_(memory) {
  const auto model = task.model();
  const bool deferred = task.defers_weights();  // shape-only parameters: assign() writes the shards
  if (!deferred) parallel::broadcast_module(comm, *model);
  // ZeRO-3's parameter gathers run in forward's order, its gradient reductions in backward's: each
  // on its own communicator.
  if (s.zero == 3) gather_comm_ = comm::make_communicator(rt, comm::default_backend(rt));
  if (rt.device().is_cuda()) flags_comm_ = comm::make_communicator(rt, comm::Backend::MPI);
  // bfloat16 parameters (with float32 master shards) with precision bf16.
  const at::ScalarType dtype = plan_strategy(s).parameter_dtype;
  optimizer_ = std::make_unique<ShardedAdamW>(
      groups_, AdamWOptions{s.lr, s.beta1, s.beta2, s.eps}, comm,
      ZeroOptions{s.zero, kBucketNumel, task.blocks(), model->parameters(), gather_comm_.get(), dtype, s.offload,
                  deferred, rt.device(), flags_comm_.get()});
  if (dtype != at::kFloat)  // frozen parameters (LoRA's base) in bfloat16 too: no master needed
    for (auto& p : model->parameters())
      if (!p.requires_grad() && p.is_floating_point()) p.set_data(p.detach().to(dtype));
}

ZeroAdamW::~ZeroAdamW() = default;

std::string ZeroAdamW::describe() const { return memory_.to_string(); }

void ZeroAdamW::begin_forward() { optimizer_->gather_outside_blocks(); }
void ZeroAdamW::end_backward() { optimizer_->end_backward(); }
void ZeroAdamW::reduce_gradients() { norm_ = optimizer_->reduce_gradients(); }

// The shards hold the gradients x the loss scale (fp16): the norm unscaled here (exact for a power
// of two), the gradients by update()'s factor.
at::Tensor ZeroAdamW::grad_norm() { return loss_scale() == 1.0 ? norm_ : norm_ / loss_scale(); }

void ZeroAdamW::clip(double norm, double max_norm) {
  // As clip_grad_norm: scaled by max_norm / (norm + 1e-6) when the norm is above max_norm.
  scale_ = (norm > max_norm && norm > 0 ? max_norm / (norm + 1e-6) : 1.0) * inverse_loss_scale();
}

void ZeroAdamW::update(int64_t step) {
  optimizer_->set_lr(learning_rate(s_, step));
  optimizer_->update(scale_);
}

void ZeroAdamW::begin_eval() { optimizer_->gather_outside_blocks(); }
void ZeroAdamW::end_eval() { optimizer_->release_all(); }

// The trained parameters unit by unit (the float32 masters gathered when they are sharded), then
// every parameter's step and the moments as one vector per unit (stages 2-3: optim/unit<k>/*, the
// unit's parameters in attribute optim_unit<k>) or ZeRO-1's flat vector (optim/flat/*, attribute
// optim_flat), each rank writing its shard without the padding. Blocks of S_u elements, or
// kShardAlign when S_u is larger (S_u is then a multiple of it), so no block straddles two ranks.
void ZeroAdamW::save_state(StateWriter& w) {
  auto& z = *optimizer_;
  const auto names = flat_names(groups_);
  z.with_each_unit(/*gather=*/true, [&](const ZeroUnit& u, const std::vector<at::Tensor>& full) {
    for (size_t k = 0; k < u.params.size(); ++k) w.replicated("model/" + names[u.params[k]], full[k]);
  });
  w.attribute("optimizer", optimizer_kind());
  for (size_t i = 0; i < names.size(); ++i)
    w.replicated("optim/" + names[i] + "/step", at::tensor({z.steps()[i]}, at::kLong));
  const auto& units = z.units();
  const bool flat = z.stage() == 1;
  for (size_t k = 0; k < units.size(); ++k) {
    const auto& u = units[k];
    const int64_t begin = std::min(u.numel, z.rank() * u.shard_numel);
    const int64_t end = std::min(u.numel, (z.rank() + 1) * u.shard_numel);
    const int64_t block = std::max<int64_t>(1, std::min(u.shard_numel, kShardAlign));
    const std::string base = flat ? "optim/flat" : "optim/unit" + std::to_string(k);
    w.sharded(base + "/exp_avg", u.numel, begin, z.exp_avg_shard().narrow(0, u.base, end - begin), block);
    w.sharded(base + "/exp_avg_sq", u.numel, begin, z.exp_avg_sq_shard().narrow(0, u.base, end - begin), block);
    if (flat) continue;
    std::vector<std::string> members;
    for (size_t i : u.params) members.push_back(names[i]);
    w.attribute("optim_unit" + std::to_string(k), joined(members));
  }
  if (flat)
    w.attribute("optim_flat", joined(names));
  else
    w.attribute("optim_units", int64_t(units.size()));
}

void ZeroAdamW::assign(const Fill& fill) {
  const auto names = flat_names(groups_);
  optimizer_->with_each_unit(/*gather=*/false, [&](const ZeroUnit& u, const std::vector<at::Tensor>& full) {
    for (size_t k = 0; k < u.params.size(); ++k) fill(names[u.params[k]], full[k]);
  });
}

// Every rank loads each unit's parameters in float32 (in shares) and keeps its shard; the moments
// are read by flat ranges from whichever layout the checkpoint has (per parameter: cut into this
// rank's shard).
void ZeroAdamW::load_state(StateReader& r) {
  at::NoGradGuard no_grad;
  check_optimizer_kind(r, optimizer_kind());
  auto& z = *optimizer_;
  const auto names = flat_names(groups_);
  z.with_each_unit(/*gather=*/false, [&](const ZeroUnit& u, const std::vector<at::Tensor>& full) {
    for (size_t k = 0; k < u.params.size(); ++k) r.load("model/" + names[u.params[k]], full[k]);
  });
  z.steps() = read_steps(r, names);
  const SavedMoments moments(r);
  for (const char* moment : {"exp_avg", "exp_avg_sq"}) {
    at::Tensor shard = std::string(moment) == "exp_avg" ? z.exp_avg_shard() : z.exp_avg_sq_shard();
    shard.zero_();
    for (const auto& u : z.units()) {  // the parts of this rank's shard of each unit
      const int64_t begin = z.rank() * u.shard_numel, end = std::min(u.numel, begin + u.shard_numel);
      for (size_t k = 0; k < u.params.size(); ++k) {
        const int64_t lo = std::max(begin, u.offsets[k]), hi = std::min(end, u.offsets[k + 1]);
        if (lo >= hi || z.steps()[u.params[k]] == 0) continue;
        const at::Tensor part = moments.read(names[u.params[k]], moment, lo - u.offsets[k], hi - lo);
        if (part.defined()) shard.narrow(0, u.base + lo - begin, hi - lo).copy_(part);
      }
    }
  }
}

}  // namespace meridian::train
