#include "meridian/train/adamw.h"

#include <algorithm>
#include <cmath>
#include <tuple>

namespace meridian::train {

namespace {
// The parameters of one kernel call: the same weight decay, device and dtype, and path.
struct Batch {
  c10::Device device;
  at::ScalarType dtype;
  bool fused;
  AdamWLists lists;
};
}  // namespace

// Its kernels exist for CPUs and CUDA GPUs in the floating dtypes, want the gradient and moments of
// the parameter's dtype and device, and (the CPU kernel) walk the four tensors as flat arrays, so all
// must be contiguous.
bool adamw_fusable(const at::Tensor& p, const at::Tensor& grad, const at::Tensor& exp_avg,
                   const at::Tensor& exp_avg_sq) {
  const auto dtype = p.scalar_type();
  const bool floating = dtype == at::kFloat || dtype == at::kDouble || dtype == at::kBFloat16 || dtype == at::kHalf;
  return (p.is_cpu() || p.is_cuda()) && floating && grad.layout() == at::kStrided && grad.scalar_type() == dtype &&
         grad.device() == p.device() && p.is_contiguous() && grad.is_contiguous() && exp_avg.is_contiguous() &&
         exp_avg_sq.is_contiguous();
}

void adamw_update(AdamWLists& b, const AdamWOptions& options, bool fused) {
  if (b.params.empty()) return;
  const double beta1 = options.beta1, beta2 = options.beta2, lr = options.lr, eps = options.eps;
  if (fused) {
    // The kernel reads each count as a float32 scalar on the parameters' device (exact to 2^24
    // steps): one small copy per call; the int64 counts stay the counts of record.
    const std::vector<float> counts(b.steps.begin(), b.steps.end());
    const auto steps =
        at::tensor(counts, at::TensorOptions().dtype(at::kFloat)).to(b.params.front().device()).unbind(0);
    at::_fused_adamw_(b.params, b.grads, b.exp_avgs, b.exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr, beta1, beta2,
                      b.weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false);
    return;
  }
  // torch::optim::AdamW::step's operations in its order (1.13 and 2.x, amsgrad off), a list at a
  // time; the denominators of the whole list are in memory together.
  std::vector<at::Scalar> bias2_sqrt, step_size;
  for (const int64_t step : b.steps) {
    bias2_sqrt.emplace_back(std::sqrt(1 - std::pow(beta2, double(step))));
    step_size.emplace_back(-lr / (1 - std::pow(beta1, double(step))));
  }
  if (b.weight_decay != 0) at::_foreach_mul_(b.params, 1 - lr * b.weight_decay);
  at::_foreach_mul_(b.exp_avgs, beta1);
  at::_foreach_add_(b.exp_avgs, b.grads, 1 - beta1);
  at::_foreach_mul_(b.exp_avg_sqs, beta2);
  at::_foreach_addcmul_(b.exp_avg_sqs, b.grads, b.grads, 1 - beta2);
  auto denom = at::_foreach_sqrt(b.exp_avg_sqs);
  at::_foreach_div_(denom, bias2_sqrt);
  at::_foreach_add_(denom, eps);
  at::_foreach_addcdiv_(b.params, b.exp_avgs, denom, step_size);
}

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options)
    : groups_(std::move(groups)), options_(options) {
  size_t n = 0;
  for (const auto& g : groups_) n += g.params.size();
  state_.resize(n);
}

void AdamW::step() {
  at::NoGradGuard no_grad;
  std::vector<Batch> batches;
  size_t index = 0;
  for (auto& group : groups_)
    for (auto& p : group.params) {
      State& s = state_[index++];
      const at::Tensor& grad = p.grad();
      if (!grad.defined()) continue;
      if (!s.exp_avg.defined()) {
        s.exp_avg = at::zeros_like(p, at::MemoryFormat::Preserve);
        s.exp_avg_sq = at::zeros_like(p, at::MemoryFormat::Preserve);
      }
      s.step += 1;
      const bool fused = options_.fused && adamw_fusable(p, grad, s.exp_avg, s.exp_avg_sq);
      const auto key = std::make_tuple(group.weight_decay, p.device(), p.scalar_type(), fused);
      auto it = std::find_if(batches.begin(), batches.end(), [&](const Batch& b) {
        return std::make_tuple(b.lists.weight_decay, b.device, b.dtype, b.fused) == key;
      });
      if (it == batches.end())
        it = batches.insert(batches.end(), Batch{p.device(), p.scalar_type(), fused, {group.weight_decay}});
      it->lists.params.push_back(p);
      it->lists.grads.push_back(grad);
      it->lists.exp_avgs.push_back(s.exp_avg);
      it->lists.exp_avg_sqs.push_back(s.exp_avg_sq);
      it->lists.steps.push_back(s.step);
    }
  for (auto& b : batches) adamw_update(b.lists, options_, b.fused);
}

}  // namespace meridian::train
