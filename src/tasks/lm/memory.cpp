// The lm task's memory plan: the closed form of what training a Llama holds per rank for every ZeRO
// stage (train::plan_units / plan_memory over the Llama's parameters), and `bench memory`'s table of it.
#include <fmt/format.h>

#include <map>

#include "meridian/models/lora.h"
#include "meridian/tasks/lm_task.h"
#include "meridian/train/memory_plan.h"
#include "meridian/train/zero.h"

namespace meridian::tasks {

train::ZeroMemoryReport lm_memory(const models::LlamaConfig& model, int stage, int64_t world,
                                  int64_t parameter_element_bytes, const models::LoraConfig* lora, bool offload) {
  // The trained parameters as the Llama registers them (embedding, layers, final norm, head), each
  // layer's as one entry: the plan needs sizes and places only.
  std::vector<train::PlannedParam> params;
  int64_t frozen = 0;
  auto add = [&](int64_t numel, int block) { params.push_back({numel, block, 0, int64_t(params.size())}); };
  if (lora && lora->enabled()) {
    // Adapters only are trained (one unit per layer); the base is frozen and replicated.
    const int64_t d = model.head_dim();
    const std::map<std::string, std::pair<int64_t, int64_t>> shapes{
        {"q_proj", {model.dim, model.heads * d}},    {"k_proj", {model.dim, model.kv_heads * d}},
        {"v_proj", {model.dim, model.kv_heads * d}}, {"o_proj", {model.heads * d, model.dim}},
        {"gate_proj", {model.dim, model.hidden}},    {"up_proj", {model.dim, model.hidden}},
        {"down_proj", {model.hidden, model.dim}}};
    int64_t per_layer = 0;
    for (const auto& target : lora->targets) {
      const auto it = shapes.find(target);
      if (it != shapes.end()) per_layer += lora->rank * (it->second.first + it->second.second);
    }
    for (int64_t l = 0; l < model.layers; ++l) add(per_layer, int(l));
    frozen = model.parameter_count();
  } else {
    add(model.vocab_size * model.dim, -1);
    for (int64_t l = 0; l < model.layers; ++l) add(model.block_parameter_count(), int(l));
    add(model.dim, -1);
    if (!model.tie_embeddings) add(model.vocab_size * model.dim, -1);
  }
  const auto plan = train::plan_units(stage, params, world, size_t(model.layers));
  return train::plan_memory(stage, plan, world, parameter_element_bytes, frozen, train::kBucketNumel, offload);
}

std::string lm_memory_table(const Config& config, const std::vector<int64_t>& ranks, int64_t lora_rank) {
  const auto model = models::LlamaConfig::from_config(config);
  const double gib = double(int64_t(1) << 30);
  std::string out = fmt::format("bench memory: {}, {} parameters ({} per layer), per rank before activations, GiB\n",
                                config.origin(), model.parameter_count(), model.block_parameter_count());
  out +=
      "| ranks | setup | parameters | gradients | AdamW state | buffers | total on the device | total GB | host "
      "(offloaded) |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|\n";
  auto lora = models::LoraConfig::from_config(config);
  lora.rank = lora_rank;
  const auto row = [&](int64_t w, const std::string& setup, const train::ZeroMemoryReport& r) {
    out += fmt::format("| {} | {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} |\n", w, setup,
                       r.parameter_bytes / gib, r.gradient_bytes / gib, r.optimizer_bytes / gib, r.buffer_bytes / gib,
                       r.total() / gib, r.total() / 1e9, r.host_bytes / gib);
  };
  for (const int64_t w : ranks) {
    for (const int64_t bytes : {int64_t(4), int64_t(2)})
      for (int stage = bytes == 4 ? 0 : 1; stage <= 3; ++stage)
        row(w,
            (stage == 0 ? std::string("DDP") : "ZeRO-" + std::to_string(stage)) +
                (bytes == 4 ? ", float32" : ", bf16 + float32 master"),
            lm_memory(model, stage, w, bytes));
    for (const int64_t bytes : {int64_t(4), int64_t(2)})
      row(w,
          std::string("ZeRO-3, ") + (bytes == 4 ? "float32" : "bf16 + float32 master") +
              ", state offloaded to host (optim.offload)",
          lm_memory(model, 3, w, bytes, nullptr, /*offload=*/true));
    if (!lora.enabled()) continue;
    for (const int64_t bytes : {int64_t(4), int64_t(2)})
      for (const int stage : {0, 3}) {
        if (bytes == 2 && stage == 0) continue;  // a bfloat16 base comes with optim.zero only
        row(w,
            "LoRA r=" + std::to_string(lora.rank) + " on " + std::to_string(lora.targets.size()) + " targets, " +
                (bytes == 4 ? "float32 base" : "bf16 base") + (stage == 0 ? ", DDP" : ", ZeRO-3 (adapters sharded)"),
            lm_memory(model, stage, w, bytes, &lora));
      }
  }
  return out;
}

}  // namespace meridian::tasks
