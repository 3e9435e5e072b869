#include "meridian/train/zero.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "meridian/core/error.h"

namespace meridian::train {

namespace {

std::string mib(int64_t bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "%.2f MiB", double(bytes) / (1024.0 * 1024.0));
  return text;
}

}  // namespace

std::string ZeroMemoryReport::to_string() const {
  std::string s = "ZeRO-1 memory per rank (" + std::to_string(world_size) + " ranks, " + std::to_string(numel) +
                  " parameter elements, shard " + std::to_string(shard_numel) + "):\n";
  s += "  parameters       " + mib(parameter_bytes) + " (replicated)\n";
  s += "  gradients        " + mib(gradient_bytes) + " (replicated)\n";
  s += "  optimizer state  " + mib(optimizer_bytes_sharded) + " sharded, " + mib(optimizer_bytes_unsharded) +
       " unsharded\n";
  s += "  work buffers     " + mib(buffer_bytes) + " (sharded only)\n";
  s += "  total            " + mib(total_sharded()) + " sharded, " + mib(total_unsharded()) + " unsharded";
  return s;
}

ShardedAdamW::ShardedAdamW(std::vector<ParamGroup> groups, const AdamWOptions& options, comm::Communicator& comm)
    : groups_(std::move(groups)), options_(options), comm_(comm) {
  world_ = comm_.size();
  rank_ = comm_.rank();
  std::optional<c10::Device> device;
  offsets_.push_back(0);
  for (const auto& group : groups_)
    for (const auto& p : group.params) {
      if (!p.defined()) throw UserError("ShardedAdamW: undefined parameter tensor");
      if (p.scalar_type() != at::kFloat)
        throw UserError(std::string("ShardedAdamW: parameters must be float32, got ") + c10::toString(p.scalar_type()));
      if (device && *device != p.device())
        throw UserError("ShardedAdamW: parameters on different devices (" + device->str() + ", " + p.device().str() + ")");
      device = p.device();
      params_.push_back({p, group.weight_decay});
      offsets_.push_back(offsets_.back() + p.numel());
    }
  numel_ = offsets_.back();
  steps_.assign(params_.size(), 0);
  const auto expected = comm_.backend() == comm::Backend::NCCL ? c10::kCUDA : c10::kCPU;
  if (device && device->type() != expected)
    throw UserError("ShardedAdamW: parameters on " + device->str() + " but the communicator is " +
                    comm::to_string(comm_.backend()));
  const auto options_f = at::TensorOptions().dtype(at::kFloat).device(device.value_or(c10::Device(expected)));

  // Every rank must hold the same layout: max and -min of (N, P) agree only if all ranks agree.
  at::Tensor counts = at::tensor({double(numel_), -double(numel_), double(params_.size()), -double(params_.size())},
                                 at::TensorOptions().dtype(at::kDouble))
                          .to(options_f.device());
  comm_.allreduce(counts, comm::ReduceOp::Max);
  const auto c = counts.cpu();
  const auto* v = c.data_ptr<double>();
  if (v[0] != -v[1] || v[2] != -v[3])
    throw UserError("ShardedAdamW: ranks disagree on the parameters: elements from " + std::to_string(int64_t(-v[1])) +
                    " to " + std::to_string(int64_t(v[0])) + ", parameters from " + std::to_string(int64_t(-v[3])) +
                    " to " + std::to_string(int64_t(v[2])) + " (this rank: " + std::to_string(numel_) + ", " +
                    std::to_string(params_.size()) + ")");

  shard_numel_ = (numel_ + world_ - 1) / world_;
  flat_ = at::zeros({shard_numel_ * world_}, options_f);
  grad_shard_ = at::zeros({shard_numel_}, options_f);
  param_shard_ = at::zeros({shard_numel_}, options_f);
  exp_avg_ = at::zeros({shard_numel_}, options_f);
  exp_avg_sq_ = at::zeros({shard_numel_}, options_f);
  flags_ = at::zeros({int64_t(params_.size())}, options_f);
}

void ShardedAdamW::step() {
  if (numel_ == 0) return;  // every rank agrees (checked at construction)
  at::NoGradGuard no_grad;
  const size_t count = params_.size();

  // 1. Which parameters have a gradient on some rank.
  {
    std::vector<float> local(count);
    for (size_t i = 0; i < count; ++i) local[i] = params_[i].tensor.grad().defined() ? 1.0f : 0.0f;
    flags_.copy_(at::from_blob(local.data(), {int64_t(count)}, at::kFloat));
  }
  comm_.allreduce(flags_, comm::ReduceOp::Max);
  std::vector<char> any(count);
  {
    const auto host = flags_.cpu();
    const float* f = host.data_ptr<float>();
    for (size_t i = 0; i < count; ++i) any[i] = f[i] != 0;
  }
  if (std::none_of(any.begin(), any.end(), [](char a) { return a != 0; })) return;  // as AdamW: nothing to do

  // 2. Gradients into the flat buffer (zeros where this rank has none, and in the padding).
  for (size_t i = 0; i < count; ++i) {
    at::Tensor segment = flat_.narrow(0, offsets_[i], offsets_[i + 1] - offsets_[i]);
    const at::Tensor& grad = params_[i].tensor.grad();
    if (grad.defined())
      segment.view(params_[i].tensor.sizes()).copy_(grad);
    else
      segment.zero_();
  }
  if (flat_.numel() > numel_) flat_.narrow(0, numel_, flat_.numel() - numel_).zero_();
  comm_.reduce_scatter(flat_, grad_shard_, comm::ReduceOp::Avg);

  // 3. AdamW on this rank's shard: the segments of the parameters that intersect it, each with the
  // operations of train::AdamW::step in the same order.
  const double beta1 = options_.beta1, beta2 = options_.beta2, lr = options_.lr;
  const int64_t begin = shard_begin(), end = shard_end();
  for (size_t i = 0; i < count; ++i) {
    if (!any[i]) continue;
    steps_[i] += 1;  // on every rank, whether or not the parameter meets this rank's shard
    const int64_t lo = std::max(begin, offsets_[i]), hi = std::min(end, offsets_[i + 1]);
    if (lo >= hi) continue;
    const int64_t n = hi - lo;
    at::Tensor p = param_shard_.narrow(0, lo - begin, n);
    p.copy_(params_[i].tensor.detach().reshape({-1}).narrow(0, lo - offsets_[i], n));
    at::Tensor grad = grad_shard_.narrow(0, lo - begin, n);
    at::Tensor exp_avg = exp_avg_.narrow(0, lo - begin, n);
    at::Tensor exp_avg_sq = exp_avg_sq_.narrow(0, lo - begin, n);
    if (params_[i].weight_decay != 0) p.mul_(1 - lr * params_[i].weight_decay);
    const double bias_correction1 = 1 - std::pow(beta1, double(steps_[i]));
    const double bias_correction2 = 1 - std::pow(beta2, double(steps_[i]));
    exp_avg.mul_(beta1).add_(grad, 1 - beta1);
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
    const at::Tensor denom = (exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(options_.eps);
    p.addcdiv_(exp_avg, denom, -lr / bias_correction1);
  }

  // 4. Every rank's updated shard into the flat buffer, then back into the updated parameters.
  comm_.allgather(param_shard_, flat_);
  for (size_t i = 0; i < count; ++i) {
    if (!any[i]) continue;
    at::Tensor& p = params_[i].tensor;
    p.detach().copy_(flat_.narrow(0, offsets_[i], offsets_[i + 1] - offsets_[i]).view(p.sizes()));
  }
}

ZeroMemoryReport ShardedAdamW::memory_report() const {
  ZeroMemoryReport r;
  r.world_size = world_;
  r.numel = numel_;
  r.shard_numel = shard_numel_;
  r.parameter_bytes = 4 * numel_;
  r.gradient_bytes = 4 * numel_;
  r.optimizer_bytes_unsharded = 8 * numel_;
  r.optimizer_bytes_sharded = 8 * shard_numel_;
  r.buffer_bytes = 4 * (shard_numel_ * world_ + 2 * shard_numel_);
  return r;
}

}  // namespace meridian::train
