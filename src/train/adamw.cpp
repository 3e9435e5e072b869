#include "meridian/train/adamw.h"

#include <cmath>

namespace meridian::train {

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options)
    : groups_(std::move(groups)), options_(options) {
  size_t n = 0;
  for (const auto& g : groups_) n += g.params.size();
  state_.resize(n);
}

void AdamW::step() {
  at::NoGradGuard no_grad;
  const double beta1 = options_.beta1, beta2 = options_.beta2, lr = options_.lr;
  size_t index = 0;
  for (auto& group : groups_)
    for (auto& p : group.params) {
      State& s = state_[index++];
      const at::Tensor& grad = p.grad();
      if (!grad.defined()) continue;
      // The order of torch::optim::AdamW::step (1.13 and 2.x, amsgrad off).
      if (group.weight_decay != 0) p.mul_(1 - lr * group.weight_decay);
      if (!s.exp_avg.defined()) {
        s.exp_avg = at::zeros_like(p, at::MemoryFormat::Preserve);
        s.exp_avg_sq = at::zeros_like(p, at::MemoryFormat::Preserve);
      }
      s.step += 1;
      const double bias_correction1 = 1 - std::pow(beta1, double(s.step));
      const double bias_correction2 = 1 - std::pow(beta2, double(s.step));
      s.exp_avg.mul_(beta1).add_(grad, 1 - beta1);
      s.exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
      const at::Tensor denom = (s.exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(options_.eps);
      p.addcdiv_(s.exp_avg, denom, -lr / bias_correction1);
    }
}

}  // namespace meridian::train
