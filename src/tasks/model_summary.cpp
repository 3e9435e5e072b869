#include "meridian/tasks/model_summary.h"

#include <fmt/format.h>
#include <torch/nn/modules/container/modulelist.h>

#include "meridian/tasks/registry.h"

namespace meridian::tasks {

namespace {

// 3157200 -> "3,157,200", as Ultralytics prints counts.
std::string grouped(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

// "meridian::models::LlamaBlockImpl" -> "LlamaBlock".
std::string type_name(const torch::nn::Module& m) {
  std::string t = m.name();
  if (const auto colon = t.rfind("::"); colon != std::string::npos) t = t.substr(colon + 2);
  if (t.size() > 4 && t.compare(t.size() - 4, 4, "Impl") == 0) t.resize(t.size() - 4);
  return t;
}

int64_t count_parameters(const torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

bool holds_list(const torch::nn::Module& m) {
  for (const auto& child : m.modules(/*include_self=*/false))
    if (child->as<torch::nn::ModuleListImpl>()) return true;
  return false;
}

// One row per module, except: a ModuleList gives a row per item, and a module that holds one
// (somewhere below) is listed by its children.
void add_rows(const std::string& name, const torch::nn::Module& m, std::vector<ModelSummary::Layer>& rows) {
  if (m.as<torch::nn::ModuleListImpl>() || holds_list(m)) {
    for (const auto& child : m.named_children()) add_rows(name + "." + child.key(), *child.value(), rows);
    // Parameters registered on the module itself (e.g. SigLIP's logit_scale) as a row of their own.
    for (const auto& p : m.named_parameters(/*recurse=*/false))
      rows.push_back({name + "." + p.key(), "Parameter", p.value().numel()});
    return;
  }
  rows.push_back({name, type_name(m), count_parameters(m)});
}

}  // namespace

ModelSummary summarize_module(const std::string& task, const torch::nn::Module& model, double flops,
                              std::string sample) {
  ModelSummary s;
  s.task = task;
  for (const auto& child : model.named_children()) add_rows(child.key(), *child.value(), s.layers);
  for (const auto& p : model.named_parameters(/*recurse=*/false))
    s.layers.push_back({p.key(), "Parameter", p.value().numel()});
  s.modules = int64_t(model.modules(/*include_self=*/true).size());
  s.parameters = count_parameters(model);
  s.gflops = flops / 1e9;
  s.sample = std::move(sample);
  return s;
}

ModelSummary summarize_model(const Config& config, int64_t image_size) {
  return task_spec(config).summarize(config, image_size);
}

std::string to_string(const ModelSummary& s) {
  size_t width = 5;
  for (const auto& l : s.layers) width = std::max(width, l.name.size());
  std::string out = fmt::format("{:<{}}  {:<24}  {:>14}\n", "layer", width, "type", "parameters");
  for (const auto& l : s.layers)
    out += fmt::format("{:<{}}  {:<24}  {:>14}\n", l.name, width, l.type, grouped(l.parameters));
  out += fmt::format("{} summary: {} modules, {} parameters, {:.1f} GFLOPs (forward, one sample: {})", s.task,
                     grouped(s.modules), grouped(s.parameters), s.gflops, s.sample);
  return out;
}

}  // namespace meridian::tasks
