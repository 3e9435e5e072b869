// LoRA (low-rank adaptation) for the Llama projections: a bias-free linear layer that can carry an
// adapter, y = x W^T + (alpha / r) dropout(x) A^T B^T with A [r, in] and B [out, r]. A starts
// Kaiming-uniform and B at zero, so an added adapter changes nothing until trained; adding one
// freezes W. Names follow Hugging Face PEFT's inside the layer: <layer>.weight, <layer>.lora_A,
// <layer>.lora_B.
//
//   auto lora = models::LoraConfig::from_config(config);     // task.lora.*
//   models::apply_lora(*llama, lora);                         // adapters on the targets, the rest frozen
//   ... train (only lora_A / lora_B require gradients) ...
//   auto merged = models::merged_weights(*llama);             // W + (alpha / r) B A, HF names, no lora_*
//   models::save_safetensors("merged.safetensors", merged);
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <string>
#include <vector>

#include "meridian/models/safetensors.h"

namespace meridian {
class Config;
class ConfigSchema;
}  // namespace meridian

namespace meridian::models {

struct LoraConfig {
  int64_t rank = 0;  // r; 0: no adapters (full fine-tuning)
  double alpha = 16;
  double dropout = 0;
  std::vector<std::string> targets{"q_proj", "v_proj"};  // layer names (the last part of the module name)
  bool enabled() const { return rank > 0; }
  // task.lora.*; ConfigError names the field.
  static LoraConfig from_config(const Config& config);
  static void declare(ConfigSchema& schema);
};

class LoraLinearImpl : public torch::nn::Module {
 public:
  // Initialised as torch::nn::Linear (Kaiming-uniform with a = sqrt(5), the same random draws).
  LoraLinearImpl(int64_t in, int64_t out);
  at::Tensor forward(const at::Tensor& x);
  // Registers lora_A [rank, in] and lora_B [out, rank] on the weight's device and freezes the weight.
  void add_adapter(int64_t rank, double alpha, double dropout);
  bool has_adapter() const { return lora_a_.defined(); }
  // W + (alpha / r) B A in float32 (W itself without an adapter); the module is not changed.
  at::Tensor merged_weight() const;
  at::Tensor weight;

 private:
  at::Tensor lora_a_, lora_b_;
  double scale_ = 0, dropout_ = 0;
};
TORCH_MODULE(LoraLinear);

// Adds an adapter to every LoraLinear of `model` whose module name ends in ".<target>" for one of
// config.targets, and freezes every other parameter. Returns how many layers got one; UserError
// naming the target when a target matches no layer.
int64_t apply_lora(torch::nn::Module& model, const LoraConfig& config);

// `model`'s parameters and buffers by name, every adapter folded into its layer's weight and no
// lora_* entry: the weights of the same model without adapters (Hugging Face names for Llama).
NamedTensors merged_weights(torch::nn::Module& model);

}  // namespace meridian::models
