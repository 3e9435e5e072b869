#include "meridian/train/sgd.h"

#include <stdexcept>
#include <string>

namespace meridian::train {

namespace {
void check_momentum(double momentum, const SGDOptions& o) {
  if (!(momentum >= 0 && momentum < 1))
    throw std::invalid_argument("SGD: momentum must be within [0, 1), got " + std::to_string(momentum));
  if (o.nesterov && !(momentum > 0 && o.dampening == 0))
    throw std::invalid_argument("SGD: Nesterov momentum requires a momentum > 0 and zero dampening");
}
}  // namespace

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& options) : groups_(std::move(groups)), options_(options) {
  if (!(options_.lr >= 0)) throw std::invalid_argument("SGD: lr must be >= 0, got " + std::to_string(options_.lr));
  if (!(options_.dampening >= 0 && options_.dampening < 1))
    throw std::invalid_argument("SGD: dampening must be within [0, 1), got " + std::to_string(options_.dampening));
  check_momentum(options_.momentum, options_);
  size_t n = 0;
  for (const auto& g : groups_) {
    n += g.params.size();
    for (size_t i = 0; i < g.params.size(); ++i) {
      const std::string name = i < g.names.size() ? g.names[i] : "";
      const bool bias = g.params[i].dim() == 1 && name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
      is_bias_.push_back(bias ? 1 : 0);
    }
  }
  state_.resize(n);
}

void SGD::set_momentum(double momentum) {
  check_momentum(momentum, options_);
  options_.momentum = momentum;
}

void SGD::step() {
  at::NoGradGuard no_grad;
  const double momentum = options_.momentum, dampening = options_.dampening;
  size_t index = 0;
  for (auto& group : groups_)
    for (auto& p : group.params) {
      const double lr = bias_lr_ >= 0 && is_bias_[index] ? bias_lr_ : options_.lr;
      State& s = state_[index++];
      const at::Tensor& grad = p.grad();
      if (!grad.defined()) continue;
      // The order of torch::optim::SGD::step (1.13 and 2.x).
      at::Tensor d_p = grad;
      if (group.weight_decay != 0) d_p = d_p.add(p, group.weight_decay);
      if (momentum != 0) {
        if (!s.momentum_buffer.defined()) {
          s.momentum_buffer = d_p.clone().detach();
        } else {
          s.momentum_buffer.mul_(momentum).add_(d_p, 1 - dampening);
        }
        d_p = options_.nesterov ? d_p.add(s.momentum_buffer, momentum) : s.momentum_buffer;
      }
      p.add_(d_p, -1 * lr);
      s.step += 1;
    }
}

}  // namespace meridian::train
