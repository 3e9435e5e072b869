#include "meridian/models/lora.h"

#include <torch/nn/functional/dropout.h>
#include <torch/nn/functional/linear.h>
#include <torch/nn/init.h>

#include <cmath>

#include "meridian/core/config.h"
#include "meridian/core/config_binding.h"
#include "meridian/core/config_schema.h"
#include "meridian/core/error.h"

namespace meridian::models {

namespace F = torch::nn::functional;

namespace {
// The task.lora keys, each bound to its field.
const ConfigBinding<LoraConfig>& lora_bindings() {
  using S = LoraConfig;
  static const auto table = [] {
    ConfigBinding<S> b;
    b.integer("task.lora.rank", &S::rank, "LoRA rank r: only low-rank adapters are trained; 0: full fine-tuning")
        .at_least(0);
    b.number("task.lora.alpha", &S::alpha, "LoRA scale numerator: the adapter is scaled by alpha / rank").above(0);
    b.number("task.lora.dropout", &S::dropout, "dropout on the adapter's input").at_least(0).below(1);
    b.strings("task.lora.targets", &S::targets,
              "layers that get adapters: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj");
    return b;
  }();
  return table;
}
}  // namespace

void LoraConfig::declare(ConfigSchema& schema) { lora_bindings().declare(schema); }

LoraConfig LoraConfig::from_config(const Config& c) {
  LoraConfig s = lora_bindings().read(c);
  if (s.enabled() && s.targets.empty())
    throw ConfigError(c.source("task.lora.targets"), "task.lora.targets", "empty: name at least one layer");
  return s;
}

LoraLinearImpl::LoraLinearImpl(int64_t in, int64_t out) {
  weight = register_parameter("weight", at::empty({out, in}));
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));  // as torch::nn::Linear
}

at::Tensor LoraLinearImpl::forward(const at::Tensor& x) {
  at::Tensor y = F::linear(x, weight);
  if (!has_adapter()) return y;
  const at::Tensor h = dropout_ > 0 ? F::dropout(x, F::DropoutFuncOptions().p(dropout_).training(is_training())) : x;
  return y + F::linear(F::linear(h, lora_a_), lora_b_) * scale_;
}

void LoraLinearImpl::add_adapter(int64_t rank, double alpha, double dropout) {
  const auto options = weight.options().dtype(at::kFloat).requires_grad(false);  // trained: float32 on any base
  lora_a_ = register_parameter("lora_A", at::empty({rank, weight.size(1)}, options));
  torch::nn::init::kaiming_uniform_(lora_a_, std::sqrt(5.0));
  lora_b_ = register_parameter("lora_B", at::zeros({weight.size(0), rank}, options));
  scale_ = alpha / double(rank);
  dropout_ = dropout;
  weight.set_requires_grad(false);
}

at::Tensor LoraLinearImpl::merged_weight() const {
  at::NoGradGuard no_grad;
  const at::Tensor w = weight.detach().to(at::kFloat);
  if (!has_adapter()) return w.clone();
  return w + at::matmul(lora_b_.detach().to(at::kFloat), lora_a_.detach().to(at::kFloat)) * scale_;
}

int64_t apply_lora(torch::nn::Module& model, const LoraConfig& config) {
  for (auto& p : model.parameters()) p.set_requires_grad(false);
  int64_t adapted = 0;
  for (const auto& target : config.targets) {
    int64_t matched = 0;
    for (const auto& item : model.named_modules("", /*include_self=*/false)) {
      const std::string& name = item.key();
      if (name.size() < target.size() + 1 || name.compare(name.size() - target.size(), target.size(), target) != 0 ||
          name[name.size() - target.size() - 1] != '.')
        continue;
      auto* layer = item.value()->as<LoraLinearImpl>();
      if (!layer) continue;
      if (!layer->has_adapter()) layer->add_adapter(config.rank, config.alpha, config.dropout), ++adapted;
      ++matched;
    }
    if (matched == 0)
      throw UserError("task.lora.targets: '" + target +
                      "' matches no adaptable layer (q_proj, k_proj, v_proj, o_proj, " +
                      "gate_proj, up_proj, down_proj)");
  }
  return adapted;
}

NamedTensors merged_weights(torch::nn::Module& model) {
  at::NoGradGuard no_grad;
  NamedTensors out;
  for (const auto& item : model.named_modules("", /*include_self=*/true)) {
    const std::string prefix = item.key().empty() ? "" : item.key() + ".";
    if (auto* layer = item.value()->as<LoraLinearImpl>()) {
      out.emplace_back(prefix + "weight", layer->merged_weight().to(layer->weight.scalar_type()));
      continue;
    }
    for (const auto& p : item.value()->named_parameters(/*recurse=*/false))
      out.emplace_back(prefix + p.key(), p.value());
    for (const auto& b : item.value()->named_buffers(/*recurse=*/false)) out.emplace_back(prefix + b.key(), b.value());
  }
  return out;
}

}  // namespace meridian::models
