#include "meridian/parallel/sync_bn.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <stdexcept>
#include <string>

namespace meridian::parallel {

namespace {

// The dtype the arithmetic runs in: float32 for reduced-precision inputs, else the input's own.
at::ScalarType compute_type(const at::Tensor& x) { return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

at::Tensor per_channel(const at::Tensor& v) { return v.view({1, -1, 1, 1}); }

void check_input(const at::Tensor& x, int64_t channels) {
  if (x.dim() != 4)
    throw std::invalid_argument("SyncBatchNorm2d: expected a 4-D input [B, C, H, W], got " + std::to_string(x.dim()) +
                                " dimensions");
  if (channels >= 0 && x.size(1) != channels)
    throw std::invalid_argument("SyncBatchNorm2d: input has " + std::to_string(x.size(1)) + " channels, expected " +
                                std::to_string(channels));
  if (!at::isFloatingType(x.scalar_type()))
    throw std::invalid_argument(std::string("SyncBatchNorm2d: floating-point input expected, got ") +
                                c10::toString(x.scalar_type()));
}

// Global statistics (one allreduce): [mean (C), biased var (C), unbiased var (C)] in float64, and
// the global count in `count` (0-dim, float64, on the device: nothing is read back on the common path).
// Each rank contributes n_r * m_r and M2_r + n_r * m_r^2 from its own mean m_r and centred sum of
// squares M2_r (accurate in float32), so the float64 difference Q / n - mean^2 loses little to
// cancellation even when |mean| >> std.
at::Tensor global_stats(comm::Communicator& comm, const at::Tensor& x, at::Tensor& count) {
  at::NoGradGuard no_grad;
  const int64_t C = x.size(1);
  const int64_t n_local = x.numel() / std::max<int64_t>(C, 1);
  at::Tensor buf = at::zeros({2 * C + 1}, x.options().dtype(at::kDouble));
  if (n_local > 0) {
    const at::Tensor xs = x.to(compute_type(x));
    const at::Tensor m = xs.mean({0, 2, 3});
    const at::Tensor m2 = (xs - per_channel(m)).pow(2).sum({0, 2, 3});
    const at::Tensor md = m.to(at::kDouble);
    buf.narrow(0, 0, C).copy_(md * double(n_local));
    buf.narrow(0, C, C).copy_(m2.to(at::kDouble) + md * md * double(n_local));
    buf.narrow(0, 2 * C, 1).fill_(double(n_local));
  }
  comm.allreduce(buf, comm::ReduceOp::Sum);  // NCCL: ordered on the stream, the host goes on
  const at::Tensor n = buf.narrow(0, 2 * C, 1).reshape({});
  count = n;
  // The global count exceeds 1 whenever this rank's does: only a rank with at most 1 value per
  // channel reads it (a host wait on a GPU). A global count of at most 1 means every rank has at most
  // 1, so every rank reads it and all throw together.
  if (n_local <= 1) {
    const double global = n.item<double>();
    if (global <= 1)
      throw std::invalid_argument(
          "SyncBatchNorm2d: expected more than 1 value per channel over all ranks in training, "
          "got " +
          std::to_string(int64_t(global)));
  }
  const at::Tensor mean = buf.narrow(0, 0, C) / n;
  const at::Tensor var = (buf.narrow(0, C, C) / n - mean * mean).clamp_min(0);
  return at::cat({mean, var, var * (n / (n - 1))});
}

// y = (x - mean) * invstd * weight + bias with mean and invstd given (global, no gradient of their
// own): the gradient through them is added in backward by the allreduce of the two sums.
class SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, const at::Tensor& mean, const at::Tensor& invstd,
                            int64_t comm_address, const at::Tensor& count) {
    ctx->saved_data["comm"] = comm_address;
    ctx->saved_data["count"] = count;
    ctx->save_for_backward({x, weight, mean, invstd});
    const at::Tensor xs = x.to(compute_type(x));
    at::Tensor y = (xs - per_channel(mean)) * per_channel(invstd);
    if (weight.defined()) y = y * per_channel(weight.to(y.scalar_type()));
    if (bias.defined()) y = y + per_channel(bias.to(y.scalar_type()));
    return y.to(x.scalar_type());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* comm = reinterpret_cast<comm::Communicator*>(ctx->saved_data["comm"].toInt());
    const at::Tensor count = ctx->saved_data["count"].toTensor();
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &weight = saved[1], &mean = saved[2], &invstd = saved[3];
    const int64_t C = x.size(1);
    const auto type = compute_type(x);
    const at::Tensor dy = grads[0].to(type);
    const at::Tensor x_hat = (x.to(type) - per_channel(mean)) * per_channel(invstd);
    // This rank's sums: the affine gradients (its share) and, summed over ranks, the mean terms.
    const at::Tensor local = at::cat({dy.sum({0, 2, 3}), (dy * x_hat).sum({0, 2, 3})});
    at::Tensor grad_weight, grad_bias, grad_x;
    // Copies: `local` must keep this rank's sums (a narrow view of it would see the allreduce below).
    const auto affine_type = weight.defined() ? weight.scalar_type() : type;
    if (weight.defined() && ctx->needs_input_grad(1))
      grad_weight = local.narrow(0, C, C).to(affine_type, /*non_blocking=*/false, /*copy=*/true);
    if (weight.defined() && ctx->needs_input_grad(2))
      grad_bias = local.narrow(0, 0, C).to(affine_type, /*non_blocking=*/false, /*copy=*/true);
    if (ctx->needs_input_grad(0)) {
      // Collective: whether x needs a gradient is a property of the program, the same on every rank.
      at::Tensor sums = local.clone();
      comm->allreduce(sums, comm::ReduceOp::Sum);
      const at::Tensor mean_dy = sums.narrow(0, 0, C) / count, mean_dy_xhat = sums.narrow(0, C, C) / count;
      at::Tensor scale = invstd;
      if (weight.defined()) scale = scale * weight.to(type);
      grad_x =
          ((dy - per_channel(mean_dy) - x_hat * per_channel(mean_dy_xhat)) * per_channel(scale)).to(x.scalar_type());
    }
    return {grad_x, grad_weight, grad_bias, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor sync_batch_norm(comm::Communicator& comm, const at::Tensor& x, const at::Tensor& weight,
                           const at::Tensor& bias, double eps, at::Tensor* stats_out) {
  check_input(x, weight.defined() ? weight.size(0) : -1);
  const int64_t C = x.size(1);
  at::Tensor count;
  const at::Tensor stats = global_stats(comm, x, count);
  const auto type = compute_type(x);
  at::Tensor mean, invstd;
  {
    at::NoGradGuard no_grad;
    mean = stats.narrow(0, 0, C).to(type);
    invstd = (stats.narrow(0, C, C) + eps).rsqrt().to(type);
  }
  if (stats_out) *stats_out = at::cat({stats.narrow(0, 0, C), stats.narrow(0, 2 * C, C), count.reshape({1})});
  // Undefined affine tensors are passed as such; the function returns no gradient for them.
  return SyncBatchNormFunction::apply(x, weight, bias, mean, invstd, reinterpret_cast<int64_t>(&comm), count);
}

SyncBatchNorm2dImpl::SyncBatchNorm2dImpl(const torch::nn::BatchNorm2dOptions& options, comm::Communicator* comm)
    : options_(options), comm_(comm) {
  if (options.num_features() < 1) throw std::invalid_argument("SyncBatchNorm2d: num_features must be at least 1");
  if (!(options.eps() > 0)) throw std::invalid_argument("SyncBatchNorm2d: eps must be positive");
  if (!options.track_running_stats())
    throw std::invalid_argument("SyncBatchNorm2d: track_running_stats(false) is not supported");
  const int64_t C = options.num_features();
  // Registration order and names as torch::nn::BatchNorm2d (NormImplBase::reset).
  if (options.affine()) {
    weight = register_parameter("weight", at::ones({C}));
    bias = register_parameter("bias", at::zeros({C}));
  } else {
    weight = register_parameter("weight", at::Tensor(), /*requires_grad=*/false);
    bias = register_parameter("bias", at::Tensor(), /*requires_grad=*/false);
  }
  running_mean = register_buffer("running_mean", at::zeros({C}));
  running_var = register_buffer("running_var", at::ones({C}));
  num_batches_tracked = register_buffer("num_batches_tracked", at::zeros({}, at::kLong));  // 0-dim, as BatchNorm2d
}

void SyncBatchNorm2dImpl::reset_running_stats() {
  at::NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1);
  num_batches_tracked.zero_();
}

at::Tensor SyncBatchNorm2dImpl::forward(const at::Tensor& x) {
  check_input(x, options_.num_features());
  if (!is_training())
    return at::batch_norm(x, weight, bias, running_mean, running_var, /*training=*/false,
                          options_.momentum().value_or(0.0), options_.eps(), at::globalContext().userEnabledCuDNN());
  if (!comm_)
    throw std::invalid_argument("SyncBatchNorm2d: training mode needs a communicator (constructed with null)");
  at::Tensor stats;
  at::Tensor y = sync_batch_norm(*comm_, x, weight, bias, options_.eps(), &stats);
  at::NoGradGuard no_grad;
  const int64_t C = options_.num_features();
  num_batches_tracked += 1;
  const auto mean = stats.narrow(0, 0, C).to(running_mean.scalar_type());
  const auto var = stats.narrow(0, C, C).to(running_var.scalar_type());
  if (options_.momentum()) {
    const double factor = *options_.momentum();
    running_mean.mul_(1 - factor).add_(mean, factor);
    running_var.mul_(1 - factor).add_(var, factor);
  } else {  // the cumulative average, its factor 1 / batches kept on the device (no read)
    const at::Tensor factor = num_batches_tracked.to(running_mean.scalar_type()).reciprocal();
    running_mean.mul_(1 - factor).add_(mean * factor);
    running_var.mul_(1 - factor).add_(var * factor);
  }
  return y;
}

}  // namespace meridian::parallel
