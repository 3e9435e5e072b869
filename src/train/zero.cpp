#include "meridian/train/zero.h"

#include <ATen/autocast_mode.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <unordered_map>

#include "meridian/core/error.h"

namespace meridian::train {

// A unit's state within a step.
struct ShardedAdamW::UnitState {
  at::Tensor flat_grad;       // W * S_u: this backward's gradients, filled by the hooks
  int64_t pending = 0;        // parameters whose gradient has not arrived in this backward
  bool ready = false;         // all arrived (or end_backward())
  comm::WorkPtr reduce;       // the reduce-scatter in flight
  at::Tensor reduced;         // its output: the gradient shard's slice, or a temporary to copy or add
  bool direct = false;        // `reduced` is the gradient shard's slice
  at::Tensor gathered;        // stage 3: W * S_u, the gathered parameters (or being gathered)
  comm::WorkPtr gather;       // in flight
  bool materialized = false;  // the parameters are views into `gathered`
  bool release_due = false;   // free once autograd has stored the last gradient (the next hook)
};

ShardedAdamW::ShardedAdamW(std::vector<ParamGroup> groups, const AdamWOptions& options, comm::Communicator& comm,
                           int64_t bucket_numel)
    : ShardedAdamW(std::move(groups), options, comm,
                   ZeroOptions{1, bucket_numel, nullptr, {}, nullptr, at::kFloat, false}) {}

ShardedAdamW::ShardedAdamW(std::vector<ParamGroup> groups, const AdamWOptions& options, comm::Communicator& comm,
                           ZeroOptions zero)
    : groups_(std::move(groups)), options_(options), comm_(comm), stage_(zero.stage) {
  if (stage_ < 1 || stage_ > 3) throw UserError("ShardedAdamW: stage must be 1, 2 or 3, got " + std::to_string(stage_));
  if (zero.param_dtype != at::kFloat && zero.param_dtype != at::kBFloat16)
    throw UserError(std::string("ShardedAdamW: parameter dtype must be float32 or bfloat16, got ") +
                    c10::toString(zero.param_dtype));
  if (zero.offload && stage_ != 3)
    throw UserError("ShardedAdamW: offloading the optimizer state needs stage 3, got stage " + std::to_string(stage_));
  if (zero.deferred && stage_ != 3)
    throw UserError("ShardedAdamW: parameters without values need stage 3, got stage " + std::to_string(stage_));
  master_ = stage_ == 3 || zero.param_dtype != at::kFloat;
  offload_ = zero.offload;
  gather_comm_ = zero.gather_comm ? zero.gather_comm : &comm_;
  flags_comm_ = zero.flags_comm;
  world_ = comm_.size();
  rank_ = comm_.rank();
  std::optional<c10::Device> device;
  offsets_.push_back(0);
  for (const auto& group : groups_)
    for (const auto& p : group.params) {
      if (!p.defined()) throw UserError("ShardedAdamW: undefined parameter tensor");
      if (!p.is_contiguous()) throw UserError("ShardedAdamW: parameters must be contiguous");
      if (p.scalar_type() != at::kFloat)
        throw UserError(std::string("ShardedAdamW: parameters must be float32, got ") + c10::toString(p.scalar_type()));
      if (zero.deferred) {
        device = zero.device;  // the parameters have no values (on the CPU); the shards go there
      } else if (device && *device != p.device())
        throw UserError("ShardedAdamW: parameters on different devices (" + device->str() + ", " + p.device().str() +
                        ")");
      else
        device = p.device();
      params_.push_back({p, group.weight_decay, p.sizes().vec()});
      offsets_.push_back(offsets_.back() + p.numel());
    }
  numel_ = offsets_.back();
  steps_.assign(params_.size(), 0);
  const auto expected = comm_.backend() == comm::Backend::NCCL ? c10::kCUDA : c10::kCPU;
  if (device && device->type() != expected)
    throw UserError("ShardedAdamW: parameters on " + device->str() + " but the communicator is " +
                    comm::to_string(comm_.backend()));
  options_f_ = at::TensorOptions().dtype(at::kFloat).device(device.value_or(c10::Device(expected)));
  options_p_ = options_f_.dtype(zero.param_dtype);
  options_s_ =
      offload_ ? at::TensorOptions().dtype(at::kFloat).pinned_memory(options_f_.device().is_cuda()) : options_f_;

  // Every rank must hold the same layout: max and -min of (N, P) agree only if all ranks agree.
  at::Tensor counts = at::tensor({double(numel_), -double(numel_), double(params_.size()), -double(params_.size())},
                                 at::TensorOptions().dtype(at::kDouble))
                          .to(options_f_.device());
  comm_.allreduce(counts, comm::ReduceOp::Max);
  const auto c = counts.cpu();
  const auto* v = c.data_ptr<double>();
  if (v[0] != -v[1] || v[2] != -v[3])
    throw UserError("ShardedAdamW: ranks disagree on the parameters: elements from " + std::to_string(int64_t(-v[1])) +
                    " to " + std::to_string(int64_t(v[0])) + ", parameters from " + std::to_string(int64_t(-v[3])) +
                    " to " + std::to_string(int64_t(v[2])) + " (this rank: " + std::to_string(numel_) + ", " +
                    std::to_string(params_.size()) + ")");

  bucket_numel_ = zero.bucket_numel;
  build_units(zero);
  state_.resize(plan_.units.size());
  for (size_t u = 0; u < plan_.units.size(); ++u) state_[u].pending = int64_t(plan_.units[u].params.size());
  shard_numel_ = plan_.shard_numel;
  if (stage_ == 1) {
    piece_ = zero_bucket_piece(shard_numel_, world_, bucket_numel_);
    bucket_ = at::zeros({piece_ * world_}, options_p_);
  }
  param_shard_ = at::zeros({shard_numel_}, options_s_);

  if (stage_ >= 2)
    for (size_t i = 0; i < params_.size(); ++i)
      hook_ids_.push_back(params_[i].tensor.register_hook([this, i](const at::Tensor& grad) { on_gradient(i, grad); }));
  if (master_) {
    // This rank's shard of every unit (the float32 master), then stage 3 frees the parameters' data
    // (gathered again when used) and bfloat16 turns them into bfloat16 copies.
    at::NoGradGuard no_grad;
    for (size_t u = 0; u < plan_.units.size(); ++u) {
      const auto& unit = plan_.units[u];
      if (!zero.deferred)
        for_each_segment(unit, rank_ * unit.shard_numel, unit.shard_numel,
                         [&](size_t k, int64_t at, int64_t from, int64_t n) {
                           param_shard_.narrow(0, unit.base + at, n)
                               .copy_(params_[unit.params[k]].tensor.detach().reshape({-1}).narrow(0, from, n));
                         });
      if (stage_ == 3) state_[u].materialized = true, release(u);
    }
    if (stage_ < 3)
      for (auto& p : params_) p.tensor.set_data(p.tensor.detach().to(options_p_.dtype()));
    if (offload_) device_shard_ = param_shard_.to(options_p_);  // after the parameters were freed
  }
  if (stage_ == 3) {
    blocks_ = zero.blocks;
    if (blocks_) blocks_->set_hooks(this);
  }
  // The rest after stage 3 has freed the parameters (peak 4 N + 4 S bytes instead of 4 N + 16 S).
  // Deferred: at first use, after the weights are written, so loading them peaks at the shard.
  if (!zero.deferred) allocate_state();
  flags_ = at::zeros({int64_t(params_.size())}, options_f_);
  has_grad_.assign(params_.size(), 0);
}

ShardedAdamW::~ShardedAdamW() {
  if (blocks_ && blocks_->hooks() == this) blocks_->set_hooks(nullptr);
  for (size_t i = 0; i < hook_ids_.size(); ++i) params_[i].tensor.remove_hook(hook_ids_[i]);
}

void ShardedAdamW::build_units(const ZeroOptions& zero) {
  plan_ = plan_units(stage_, planned_params(groups_, zero.blocks, zero.registration), world_,
                     zero.blocks ? zero.blocks->blocks().size() : 0, bucket_numel_);
}

void ShardedAdamW::on_gradient(size_t i, const at::Tensor& grad) {
  at::NoGradGuard no_grad;
  // Parameters whose .grad autograd stored after their unit was reduced: dropped now.
  for (size_t j : stale_) params_[j].tensor.mutable_grad() = at::Tensor();
  stale_.clear();
  release_due_units();
  retire_reductions(/*all=*/false);
  const size_t u = plan_.unit_of[i];
  const ZeroUnit& unit = plan_.units[u];
  UnitState& st = state_[u];
  if (!st.flat_grad.defined()) st.flat_grad = at::zeros({world_ * unit.shard_numel}, options_p_);
  const size_t k = plan_.slot[i];
  st.flat_grad.narrow(0, unit.offsets[k], unit.offsets[k + 1] - unit.offsets[k]).copy_(grad.reshape({-1}));
  has_grad_[i] = 1;
  stale_.push_back(i);
  if (--st.pending > 0) return;
  st.ready = true;
  if (stage_ == 3 && st.materialized) st.release_due = true;
  issue_ready_reductions();
}

void ShardedAdamW::allocate_state() {
  if (grad_shard_.defined()) return;
  grad_shard_ = at::zeros({shard_numel_}, options_s_);
  exp_avg_ = at::zeros({shard_numel_}, options_s_);
  exp_avg_sq_ = at::zeros({shard_numel_}, options_s_);
}

void ShardedAdamW::issue_ready_reductions() {
  allocate_state();
  while (next_reduce_ < plan_.reduce_order.size() && state_[plan_.reduce_order[next_reduce_]].ready) {
    const size_t u = plan_.reduce_order[next_reduce_++];
    const ZeroUnit& unit = plan_.units[u];
    UnitState& st = state_[u];
    if (!st.flat_grad.defined()) st.flat_grad = at::zeros({world_ * unit.shard_numel}, options_p_);
    st.direct = micro_ == 0 && options_p_.dtype() == at::kFloat && !offload_;
    st.reduced =
        st.direct ? grad_shard_.narrow(0, unit.base, unit.shard_numel) : at::empty({unit.shard_numel}, options_p_);
    st.reduce = comm_.reduce_scatter_async(st.flat_grad, st.reduced, comm::ReduceOp::Avg);
    in_flight_.push_back(u);
    // At most kInFlight units' gradient buffers at once: the oldest waited for beyond that.
    if (in_flight_.size() > kInFlight) retire(in_flight_.front());
  }
}

void ShardedAdamW::retire(size_t u) {
  UnitState& st = state_[u];
  st.reduce->wait();
  at::Tensor shard = grad_shard_.narrow(0, plan_.units[u].base, plan_.units[u].shard_numel);
  if (!st.direct) micro_ == 0 ? shard.copy_(st.reduced) : shard.add_(st.reduced.to(shard.device(), at::kFloat));
  st.reduce.reset();
  st.reduced = st.flat_grad = at::Tensor();
  in_flight_.erase(std::find(in_flight_.begin(), in_flight_.end(), u));
}

void ShardedAdamW::retire_reductions(bool all) {
  while (!in_flight_.empty() && (all || state_[in_flight_.front()].reduce->is_completed())) retire(in_flight_.front());
}

void ShardedAdamW::end_backward() {
  if (stage_ == 1) return;
  at::NoGradGuard no_grad;
  for (auto& st : state_) st.ready = true;  // what backward did not complete: zeros where missing
  issue_ready_reductions();
  retire_reductions(/*all=*/true);
  for (size_t u = 0; u < plan_.units.size(); ++u) {
    state_[u].ready = false;
    state_[u].pending = int64_t(plan_.units[u].params.size());
  }
  next_reduce_ = 0;
  stale_.clear();
  for (auto& p : params_) p.tensor.mutable_grad() = at::Tensor();
  if (stage_ == 3) release_all();
  ++micro_;
}

void ShardedAdamW::gather(size_t u) {
  UnitState& st = state_[u];
  if (st.gathered.defined()) return;  // gathered or on its way
  const ZeroUnit& unit = plan_.units[u];
  st.gathered = at::empty({world_ * unit.shard_numel}, options_p_);
  st.gather = gather_comm_->allgather_async(shard_on_device(unit, options_p_.dtype().toScalarType()), st.gathered);
}

at::Tensor ShardedAdamW::shard_on_device(const ZeroUnit& unit, at::ScalarType dtype) const {
  if (!offload_) return param_shard_.narrow(0, unit.base, unit.shard_numel).to(dtype);
  const at::Tensor on_device = device_shard_.narrow(0, unit.base, unit.shard_numel);
  return dtype == options_p_.dtype() ? on_device : param_shard_.narrow(0, unit.base, unit.shard_numel).to(options_f_);
}

void ShardedAdamW::materialize(size_t u) {
  UnitState& st = state_[u];
  st.release_due = false;
  if (st.materialized) return;
  gather(u);
  st.gather->wait();
  st.gather.reset();
  const ZeroUnit& unit = plan_.units[u];
  const auto views = unit_views(unit, st.gathered);
  for (size_t k = 0; k < unit.params.size(); ++k) params_[unit.params[k]].tensor.set_data(views[k]);
  st.materialized = true;
}

void ShardedAdamW::release(size_t u) {
  UnitState& st = state_[u];
  st.release_due = false;
  if (st.gather) st.gather->wait(), st.gather.reset();  // a prefetch nobody used
  if (st.materialized) {
    const at::Tensor empty = at::empty({0}, options_p_);
    for (size_t i : plan_.units[u].params) params_[i].tensor.set_data(empty);
    // Autocast keeps bfloat16 casts of the weights it saw; they would keep this unit alive.
    at::autocast::clear_cache();
  }
  st.materialized = false;
  st.gathered = at::Tensor();
}

void ShardedAdamW::release_due_units() {
  for (size_t u = 0; u < plan_.units.size(); ++u)
    if (state_[u].release_due) release(u);
}

std::vector<at::Tensor> ShardedAdamW::unit_views(const ZeroUnit& unit, const at::Tensor& flat) const {
  std::vector<at::Tensor> views;
  for (size_t k = 0; k < unit.params.size(); ++k)
    views.push_back(
        flat.narrow(0, unit.offsets[k], unit.offsets[k + 1] - unit.offsets[k]).view(params_[unit.params[k]].shape));
  return views;
}

void ShardedAdamW::gather_outside_blocks() {
  if (stage_ != 3) return;
  for (size_t u = 0; u < plan_.units.size(); ++u)
    if (plan_.units[u].block < 0) gather(u);
  for (size_t u = 0; u < plan_.units.size(); ++u)
    if (plan_.units[u].block < 0) materialize(u);
}

void ShardedAdamW::release_all() {
  if (stage_ != 3) return;
  for (size_t u = 0; u < plan_.units.size(); ++u) release(u);
}

void ShardedAdamW::before(size_t block, bool recompute) {
  if (stage_ != 3 || block >= plan_.block_unit.size()) return;
  release_due_units();
  if (plan_.block_unit[block] >= 0) materialize(size_t(plan_.block_unit[block]));
  // The next block in this direction (forward: up; recomputation in backward: down) gathered ahead.
  for (size_t b = recompute ? block - 1 : block + 1; b < plan_.block_unit.size(); b = recompute ? b - 1 : b + 1)
    if (plan_.block_unit[b] >= 0) {
      gather(size_t(plan_.block_unit[b]));
      break;
    }
}

void ShardedAdamW::after(size_t block, bool /*recompute*/) {
  if (stage_ != 3 || block >= plan_.block_unit.size() || plan_.block_unit[block] < 0) return;
  // Without a graph nothing refers to the parameters any more (evaluation, checkpointing's first pass).
  if (!at::GradMode::is_enabled()) release(size_t(plan_.block_unit[block]));
}

at::Tensor ShardedAdamW::reduce_gradients() {
  allocate_state();
  any_.assign(params_.size(), 0);
  const int64_t micro = std::exchange(micro_, 0);
  const auto zero = [&] { return at::zeros({}, options_f_.dtype(at::kDouble)); };
  if (numel_ == 0) return zero();  // every rank agrees (checked at construction)
  at::NoGradGuard no_grad;
  const size_t count = params_.size();

  // 1. Which parameters have a gradient on some rank.
  {
    std::vector<float> local(count);
    for (size_t i = 0; i < count; ++i)
      local[i] = (stage_ == 1 ? params_[i].tensor.grad().defined() : has_grad_[i] != 0) ? 1.0f : 0.0f;
    if (flags_comm_) {  // on the host: nothing read back from the device
      at::Tensor host = at::from_blob(local.data(), {int64_t(count)}, at::kFloat);
      flags_comm_->allreduce(host, comm::ReduceOp::Max);
    } else {
      flags_.copy_(at::from_blob(local.data(), {int64_t(count)}, at::kFloat));
      comm_.allreduce(flags_, comm::ReduceOp::Max);
      const auto host = flags_.cpu();
      std::copy(host.data_ptr<float>(), host.data_ptr<float>() + count, local.begin());
    }
    for (size_t i = 0; i < count; ++i) any_[i] = local[i] != 0;
  }
  has_grad_.assign(count, 0);
  std::vector<char>& any = any_;
  if (std::none_of(any.begin(), any.end(), [](char a) { return a != 0; })) return zero();  // as AdamW: nothing to do
  if (stage_ >= 2 && micro == 0)
    throw UserError("ShardedAdamW: reduce_gradients() at stage " + std::to_string(stage_) +
                    " without end_backward() after the backward");

  // 2. Stage 1, bucket by bucket: piece [k0, k0 + c) of every rank's shard of the flat gradient
  // (zeros where this rank has none, and in the padding), reduce-scattered into this rank's piece.
  if (stage_ == 1) {
    const ZeroUnit& unit = plan_.units[0];
    for (int64_t k0 = 0; k0 < shard_numel_; k0 += piece_) {
      const int64_t c = std::min(piece_, shard_numel_ - k0);
      at::Tensor in = bucket_.narrow(0, 0, world_ * c);
      for (int64_t r = 0; r < world_; ++r) {
        at::Tensor piece = in.narrow(0, r * c, c);
        piece.zero_();
        for_each_segment(unit, r * shard_numel_ + k0, c, [&](size_t k, int64_t at, int64_t from, int64_t n) {
          const at::Tensor& grad = params_[unit.params[k]].tensor.grad();
          if (grad.defined()) piece.narrow(0, at, n).copy_(grad.reshape({-1}).narrow(0, from, n));
        });
      }
      at::Tensor out = grad_shard_.narrow(0, k0, c);
      if (options_p_.dtype() == at::kFloat) {
        comm_.reduce_scatter(in, out, comm::ReduceOp::Avg);
      } else {  // reduced in bfloat16 (half the bytes), kept in float32
        at::Tensor low = at::empty({c}, options_p_);
        comm_.reduce_scatter(in, low, comm::ReduceOp::Avg);
        out.copy_(low);
      }
    }
  }
  // The global norm: each rank's share of the sum of squares (padding is zero), summed in double.
  // In pieces: a double copy of the whole shard would be 2 S doubles at once.
  at::Tensor squares = at::zeros({1}, grad_shard_.options().dtype(at::kDouble));
  constexpr int64_t kPiece = int64_t(1) << 22;
  for (int64_t k0 = 0; k0 < shard_numel_; k0 += kPiece)
    squares += grad_shard_.narrow(0, k0, std::min(kPiece, shard_numel_ - k0)).to(at::kDouble).pow(2).sum();
  if (offload_) squares = squares.to(options_f_.device());  // the collective on the parameters' device
  comm_.allreduce(squares, comm::ReduceOp::Sum);
  return squares.reshape({}).sqrt();
}

void ShardedAdamW::update(double grad_scale) {
  allocate_state();
  const std::vector<char>& any = any_;
  if (std::none_of(any.begin(), any.end(), [](char a) { return a != 0; })) return;  // every rank agrees
  at::NoGradGuard no_grad;
  if (grad_scale != 1.0) grad_shard_.mul_(grad_scale);
  for (size_t i = 0; i < params_.size(); ++i)
    if (any[i]) steps_[i] += 1;  // on every rank, whether or not the parameter meets this rank's shard

  // 3. AdamW on this rank's shard: the segments of the parameters that intersect it, by weight decay,
  // through the update train::AdamW uses (adamw_update: one fused call per list), so that the result
  // is train::AdamW's bit for bit.
  std::vector<AdamWLists> lists;
  for (const ZeroUnit& unit : plan_.units)
    for_each_segment(
        unit, rank_ * unit.shard_numel, unit.shard_numel, [&](size_t k, int64_t at, int64_t from, int64_t n) {
          const size_t i = unit.params[k];
          if (!any[i]) return;
          at::Tensor p = param_shard_.narrow(0, unit.base + at, n);
          if (!master_) p.copy_(params_[i].tensor.detach().reshape({-1}).narrow(0, from, n));
          const double decay = params_[i].weight_decay;
          auto it =
              std::find_if(lists.begin(), lists.end(), [&](const AdamWLists& l) { return l.weight_decay == decay; });
          if (it == lists.end()) it = lists.insert(lists.end(), AdamWLists{decay});
          it->params.push_back(p);
          it->grads.push_back(grad_shard_.narrow(0, unit.base + at, n));
          it->exp_avgs.push_back(exp_avg_.narrow(0, unit.base + at, n));
          it->exp_avg_sqs.push_back(exp_avg_sq_.narrow(0, unit.base + at, n));
          it->steps.push_back(steps_[i]);
        });
  for (auto& l : lists) {
    bool fused = options_.fused;
    for (size_t k = 0; fused && k < l.params.size(); ++k)
      fused = adamw_fusable(l.params[k], l.grads[k], l.exp_avgs[k], l.exp_avg_sqs[k]);
    adamw_update(l, options_, fused);
  }
  if (offload_) device_shard_.copy_(param_shard_);  // the new shard back for the gathers
  if (stage_ == 3) return;                          // the shard is the parameter

  // 4. Every rank's updated pieces gathered, then copied into the parameters that were updated (the
  // others are not written at all). Stage 1 bucket by bucket, stage 2 unit by unit.
  auto copy_back = [&](const ZeroUnit& unit, const at::Tensor& out, int64_t k0, int64_t c) {
    for (int64_t r = 0; r < world_; ++r)
      for_each_segment(unit, r * unit.shard_numel + k0, c, [&](size_t k, int64_t at, int64_t from, int64_t n) {
        const size_t i = unit.params[k];
        if (any[i]) params_[i].tensor.detach().view({-1}).narrow(0, from, n).copy_(out.narrow(0, r * c + at, n));
      });
  };
  if (stage_ == 1) {
    for (int64_t k0 = 0; k0 < shard_numel_; k0 += piece_) {
      const int64_t c = std::min(piece_, shard_numel_ - k0);
      at::Tensor out = bucket_.narrow(0, 0, world_ * c);
      comm_.allgather(param_shard_.narrow(0, k0, c).to(options_p_.dtype()), out);
      copy_back(plan_.units[0], out, k0, c);
    }
    return;
  }
  for (const ZeroUnit& unit : plan_.units) {
    at::Tensor out = at::empty({world_ * unit.shard_numel}, options_p_);
    comm_.allgather(param_shard_.narrow(0, unit.base, unit.shard_numel).to(options_p_.dtype()), out);
    copy_back(unit, out, 0, unit.shard_numel);
  }
}

void ShardedAdamW::with_each_unit(bool gather_first,
                                  const std::function<void(const ZeroUnit&, const std::vector<at::Tensor>&)>& fn) {
  at::NoGradGuard no_grad;
  for (const ZeroUnit& unit : plan_.units) {
    std::vector<at::Tensor> full;
    at::Tensor buffer;  // the unit's float32 values when the shard is the master
    if (master_) {
      buffer = at::zeros({world_ * unit.shard_numel}, options_f_);
      if (gather_first) gather_comm_->allgather(shard_on_device(unit, at::kFloat), buffer);
      full = unit_views(unit, buffer);
    } else {
      for (size_t i : unit.params) full.push_back(params_[i].tensor.detach());
    }
    fn(unit, full);
    if (gather_first || !master_) continue;
    param_shard_.narrow(0, unit.base, unit.shard_numel)
        .copy_(buffer.narrow(0, rank_ * unit.shard_numel, unit.shard_numel));
    if (offload_)
      device_shard_.narrow(0, unit.base, unit.shard_numel)
          .copy_(buffer.narrow(0, rank_ * unit.shard_numel, unit.shard_numel));
    if (stage_ < 3)  // the replicated (bfloat16) parameters too
      for (size_t k = 0; k < unit.params.size(); ++k) params_[unit.params[k]].tensor.detach().copy_(full[k]);
  }
}

template <typename F>
void ShardedAdamW::for_each_segment(const ZeroUnit& unit, int64_t begin, int64_t count, F&& f) const {
  const auto& offsets = unit.offsets;
  const int64_t end = std::min(unit.numel, begin + count);
  // The first parameter whose range ends after `begin`.
  size_t k = size_t(std::upper_bound(offsets.begin(), offsets.end(), begin) - offsets.begin());
  for (k = k == 0 ? 0 : k - 1; k + 1 < offsets.size() && offsets[k] < end; ++k) {
    const int64_t lo = std::max(begin, offsets[k]), hi = std::min(end, offsets[k + 1]);
    if (lo < hi) f(k, lo - begin, lo - offsets[k], hi - lo);
  }
}

ZeroMemoryReport ShardedAdamW::memory_report() const {
  return plan_memory(stage_, plan_, world_, int64_t(options_p_.dtype().itemsize()), 0, bucket_numel_, offload_);
}

}  // namespace meridian::train
