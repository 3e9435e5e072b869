// Exponential moving average of a model's weights (as ultralytics' ModelEMA): a copy of every
// parameter and every buffer, by module name, updated after each applied optimizer step:
//
//   updates += 1;  d = decay * (1 - exp(-updates / tau))
//   floating-point tensors:  ema.mul_(d).add_(model, 1 - d)
//   integer buffers (e.g. BatchNorm's num_batches_tracked):  ema.copy_(model)
//
// so early updates follow the model closely and d approaches `decay` after a few tau updates.
// Evaluation swaps the EMA into the model (Ema::Swap) and puts the training weights back bit for bit.
//
// Not collective (every rank holds the same model, so the same EMA), not thread-safe. The module
// must keep its parameters and buffers (the same tensors, updated in place) for the Ema's lifetime.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace torch::nn {
class Module;
}

namespace meridian::train {

class Ema {
 public:
  // Copies the module's current parameters and buffers (the EMA starts at the model).
  // std::invalid_argument unless 0 < decay < 1 and tau > 0.
  Ema(torch::nn::Module& module, double decay, double tau);

  double decay() const { return decay_; }
  double tau() const { return tau_; }
  // The decay used by update number `update` (1-based): decay * (1 - exp(-update / tau)).
  double decay_at(int64_t update) const;

  // One update from the module's current values (call after each applied optimizer step).
  void update();
  int64_t updates() const { return updates_; }
  void set_updates(int64_t updates) { updates_ = updates; }  // on resume, with the tensors

  // Parameter names then buffer names (module order), parallel to tensors() and to the module's.
  const std::vector<std::string>& names() const { return names_; }
  std::vector<at::Tensor>& tensors() { return ema_; }  // the averages (load into them in place)
  const std::vector<at::Tensor>& tensors() const { return ema_; }

  // While alive, the module holds the EMA values; the destructor copies the module's own values back
  // (bit for bit). Not nestable. Modifications of the module's tensors while swapped are lost.
  class Swap {
   public:
    explicit Swap(Ema& ema);
    ~Swap();
    Swap(const Swap&) = delete;
    Swap& operator=(const Swap&) = delete;

   private:
    Ema& ema_;
    std::vector<at::Tensor> saved_;
  };

 private:
  double decay_, tau_;
  int64_t updates_ = 0;
  std::vector<std::string> names_;
  std::vector<at::Tensor> model_, ema_;  // the module's tensors (shared), the averages (own storage)
};

}  // namespace meridian::train
