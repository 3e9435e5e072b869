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

int64_t zero_bucket_piece(int64_t shard_numel, int64_t world, int64_t bucket_numel) {
  return std::max<int64_t>(1, std::min(shard_numel, bucket_numel / world));
}

int64_t zero_shard_numel(int64_t numel, int64_t world) {
  const int64_t s = (numel + world - 1) / world;
  return s > kShardAlign ? (s + kShardAlign - 1) / kShardAlign * kShardAlign : s;
}

ZeroMemoryReport ZeroMemoryReport::of(int64_t numel, int64_t world, int64_t bucket_numel) {
  ZeroMemoryReport r;
  r.world_size = world;
  r.numel = numel;
  r.shard_numel = zero_shard_numel(numel, world);
  r.parameter_bytes = 4 * numel;
  r.gradient_bytes = 4 * numel;
  r.optimizer_bytes_unsharded = 8 * numel;
  r.optimizer_bytes_sharded = 8 * r.shard_numel;
  r.buffer_bytes = 4 * (zero_bucket_piece(r.shard_numel, world, bucket_numel) * world + 2 * r.shard_numel);
  return r;
}

ShardedAdamW::ShardedAdamW(std::vector<ParamGroup> groups, const AdamWOptions& options, comm::Communicator& comm,
                           int64_t bucket_numel)
    : groups_(std::move(groups)), options_(options), comm_(comm) {
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
      if (device && *device != p.device())
        throw UserError("ShardedAdamW: parameters on different devices (" + device->str() + ", " + p.device().str() +
                        ")");
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

  shard_numel_ = zero_shard_numel(numel_, world_);
  bucket_numel_ = bucket_numel;
  piece_ = zero_bucket_piece(shard_numel_, world_, bucket_numel);
  bucket_ = at::zeros({piece_ * world_}, options_f);
  grad_shard_ = at::zeros({shard_numel_}, options_f);
  param_shard_ = at::zeros({shard_numel_}, options_f);
  exp_avg_ = at::zeros({shard_numel_}, options_f);
  exp_avg_sq_ = at::zeros({shard_numel_}, options_f);
  flags_ = at::zeros({int64_t(params_.size())}, options_f);
}

double ShardedAdamW::reduce_gradients() {
  any_.assign(params_.size(), 0);
  if (numel_ == 0) return 0;  // every rank agrees (checked at construction)
  at::NoGradGuard no_grad;
  const size_t count = params_.size();

  // 1. Which parameters have a gradient on some rank.
  {
    std::vector<float> local(count);
    for (size_t i = 0; i < count; ++i) local[i] = params_[i].tensor.grad().defined() ? 1.0f : 0.0f;
    flags_.copy_(at::from_blob(local.data(), {int64_t(count)}, at::kFloat));
  }
  comm_.allreduce(flags_, comm::ReduceOp::Max);
  std::vector<char>& any = any_;
  {
    const auto host = flags_.cpu();
    const float* f = host.data_ptr<float>();
    for (size_t i = 0; i < count; ++i) any[i] = f[i] != 0;
  }
  if (std::none_of(any.begin(), any.end(), [](char a) { return a != 0; })) return 0;  // as AdamW: nothing to do

  // 2. Bucket by bucket: piece [k0, k0 + c) of every rank's shard of the flat gradient (zeros where
  // this rank has none, and in the padding), reduce-scattered into this rank's piece.
  for (int64_t k0 = 0; k0 < shard_numel_; k0 += piece_) {
    const int64_t c = std::min(piece_, shard_numel_ - k0);
    at::Tensor in = bucket_.narrow(0, 0, world_ * c);
    for (int64_t r = 0; r < world_; ++r) {
      at::Tensor piece = in.narrow(0, r * c, c);
      piece.zero_();
      for_each_segment(r * shard_numel_ + k0, c, [&](size_t i, int64_t at, int64_t from, int64_t n) {
        const at::Tensor& grad = params_[i].tensor.grad();
        if (grad.defined()) piece.narrow(0, at, n).copy_(grad.reshape({-1}).narrow(0, from, n));
      });
    }
    at::Tensor out = grad_shard_.narrow(0, k0, c);
    comm_.reduce_scatter(in, out, comm::ReduceOp::Avg);
  }
  // The global norm: each rank's share of the sum of squares (padding is zero), summed in double.
  at::Tensor squares = grad_shard_.to(at::kDouble).pow(2).sum().reshape({1});
  comm_.allreduce(squares, comm::ReduceOp::Sum);
  return std::sqrt(squares.item<double>());
}

void ShardedAdamW::update(double grad_scale) {
  const std::vector<char>& any = any_;
  if (std::none_of(any.begin(), any.end(), [](char a) { return a != 0; })) return;  // every rank agrees
  at::NoGradGuard no_grad;
  const size_t count = params_.size();
  if (grad_scale != 1.0) grad_shard_.mul_(grad_scale);

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

  // 4. Bucket by bucket: every rank's updated piece gathered, then copied into the parameters that
  // were updated (the others are not written at all).
  for (int64_t k0 = 0; k0 < shard_numel_; k0 += piece_) {
    const int64_t c = std::min(piece_, shard_numel_ - k0);
    at::Tensor out = bucket_.narrow(0, 0, world_ * c);
    comm_.allgather(param_shard_.narrow(0, k0, c), out);
    for (int64_t r = 0; r < world_; ++r)
      for_each_segment(r * shard_numel_ + k0, c, [&](size_t i, int64_t at, int64_t from, int64_t n) {
        if (any[i]) params_[i].tensor.detach().view({-1}).narrow(0, from, n).copy_(out.narrow(0, r * c + at, n));
      });
  }
}

template <typename F>
void ShardedAdamW::for_each_segment(int64_t begin, int64_t count, F&& f) const {
  const int64_t end = std::min(numel_, begin + count);
  // The first parameter whose range ends after `begin`.
  size_t i = size_t(std::upper_bound(offsets_.begin(), offsets_.end(), begin) - offsets_.begin());
  for (i = i == 0 ? 0 : i - 1; i + 1 < offsets_.size() && offsets_[i] < end; ++i) {
    const int64_t lo = std::max(begin, offsets_[i]), hi = std::min(end, offsets_[i + 1]);
    if (lo < hi) f(i, lo - begin, lo - offsets_[i], hi - lo);
  }
}

ZeroMemoryReport ShardedAdamW::memory_report() const { return ZeroMemoryReport::of(numel_, world_, bucket_numel_); }

}  // namespace meridian::train
