#include "meridian/tasks/model_summary.h"

#include <fmt/format.h>
#include <torch/nn/modules/container/modulelist.h>

#include "meridian/core/error.h"
#include "meridian/models/llama.h"
#include "meridian/models/siglip.h"
#include "meridian/models/yolo.h"
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

ModelSummary summarize(const std::string& task, const torch::nn::Module& model, double flops, std::string sample) {
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

}  // namespace

ModelSummary summarize_model(const Config& config, int64_t image_size) {
  const std::string task = task_name(config);
  if (image_size != 0 && task != "detect")
    throw UserError("model: --image-size is detect's input size (" + task +
                    (task == "siglip" ? ": the image size is model.image_size)" : ": no images)"));
  if (image_size < 0 || image_size % 32 != 0)
    throw UserError("model: --image-size must be a positive multiple of 32, got " + std::to_string(image_size));
  if (task == "detect") {
    const auto mc = models::YoloConfig::from_config(config);
    int64_t size = image_size;
    if (size == 0 && config.has("data.image_size")) size = config.get<int64_t>("data.image_size");
    if (size == 0) size = 640;
    models::Yolo model(mc);
    return summarize(task, *model, model->flops(size), fmt::format("a {}x{} image", size, size));
  }
  if (task == "lm") {
    const auto mc = models::LlamaConfig::from_config(config);
    models::Llama model(mc, /*values=*/false);  // shapes only: a 7B summary holds no weights
    return summarize(task, *model, mc.flops_per_token(mc.max_seq_len) * double(mc.max_seq_len),
                     fmt::format("a sequence of {} tokens (model.max_seq_len)", mc.max_seq_len));
  }
  const auto mc = models::SiglipConfig::from_config(config);
  models::Siglip model(mc);
  return summarize(
      task, *model, mc.flops_per_sample(),
      fmt::format("an image of {}x{} and a caption of {} tokens", mc.image_size, mc.image_size, mc.context_length));
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
