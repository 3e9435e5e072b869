#include "meridian/train/ema.h"

#include <torch/nn/module.h>

#include <cmath>
#include <stdexcept>

namespace meridian::train {

Ema::Ema(torch::nn::Module& module, double decay, double tau) : decay_(decay), tau_(tau) {
  if (!(decay > 0 && decay < 1))
    throw std::invalid_argument("Ema: decay must be within (0, 1), got " + std::to_string(decay));
  if (!(tau > 0)) throw std::invalid_argument("Ema: tau must be > 0, got " + std::to_string(tau));
  at::NoGradGuard no_grad;
  auto add = [&](const std::string& name, const at::Tensor& t) {
    names_.push_back(name);
    model_.push_back(t);
    ema_.push_back(t.detach().clone());
  };
  for (const auto& item : module.named_parameters()) add(item.key(), item.value());
  for (const auto& item : module.named_buffers()) add(item.key(), item.value());
}

double Ema::decay_at(int64_t update) const { return decay_ * (1 - std::exp(-double(update) / tau_)); }

void Ema::update() {
  at::NoGradGuard no_grad;
  ++updates_;
  const double d = decay_at(updates_);
  for (size_t i = 0; i < ema_.size(); ++i) {
    const at::Tensor& m = model_[i];
    if (c10::isFloatingType(ema_[i].scalar_type()))
      ema_[i].mul_(d).add_(m.detach(), 1 - d);
    else
      ema_[i].copy_(m.detach());
  }
}

Ema::Swap::Swap(Ema& ema) : ema_(ema) {
  at::NoGradGuard no_grad;
  saved_.reserve(ema_.model_.size());
  for (size_t i = 0; i < ema_.model_.size(); ++i) {
    at::Tensor m = ema_.model_[i].detach();
    saved_.push_back(m.clone());
    m.copy_(ema_.ema_[i]);
  }
}

Ema::Swap::~Swap() {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < saved_.size(); ++i) ema_.model_[i].detach().copy_(saved_[i]);
}

}  // namespace meridian::train
