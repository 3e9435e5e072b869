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
// the global count in `count`.
// Each rank contributes n_r * m_r and M2_r + n_r * m_r^2 from its own mean m_r and centred sum of
// squares M2_r (accurate in float32), so the float64 difference Q / n - mean^2 loses little to
// cancellation even when |mean| >> std.
at::Tensor global_stats(comm::Communicator& comm, const at::Tensor& x, double& count) {
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
  comm.allreduce(buf, comm::ReduceOp::Sum);
  // One 8-byte read (a device sync on CUDA): every rank sees the same count, so all throw together.
  const double n = buf.narrow(0, 2 * C, 1).item<double>();
  count = n;
  if (n <= 1)
    throw std::invalid_argument(
        "SyncBatchNorm2d: expected more than 1 value per channel over all ranks in training, "
        "got " +
        std::to_string(int64_t(n)));
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
                            int64_t comm_address, double count) {
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
    const double count = ctx->saved_data["count"].toDouble();
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
  double count = 0;
  const at::Tensor stats = global_stats(comm, x, count);
  const auto type = compute_type(x);
  at::Tensor mean, invstd;
  {
    at::NoGradGuard no_grad;
    mean = stats.narrow(0, 0, C).to(type);
    invstd = (stats.narrow(0, C, C) + eps).rsqrt().to(type);
  }
  if (stats_out)
    *stats_out = at::cat({stats.narrow(0, 0, C), stats.narrow(0, 2 * C, C), at::full({1}, count, stats.options())});
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
  const double factor = options_.momentum() ? *options_.momentum() : 1.0 / num_batches_tracked.item<double>();
  running_mean.mul_(1 - factor).add_(stats.narrow(0, 0, C).to(running_mean.scalar_type()), factor);
  running_var.mul_(1 - factor).add_(stats.narrow(0, C, C).to(running_var.scalar_type()), factor);
  return y;
}

}  // namespace meridian::parallel
