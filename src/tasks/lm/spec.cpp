// The lm task's spec: Llama-style SFT, Hugging Face LlamaForCausalLM in and out, generation and the
// closed-form memory plan.
#include <fmt/format.h>

#include "../specs.h"
#include "meridian/core/error.h"
#include "meridian/models/llama.h"
#include "meridian/models/llama_hf.h"
#include "meridian/tasks/lm_hf.h"
#include "meridian/tasks/lm_task.h"

namespace meridian::tasks {

namespace {

ModelSummary summarize_lm(const Config& config, int64_t image_size) {
  if (image_size != 0) throw UserError("--image-size does not apply to task lm (it has no images)");
  const auto mc = models::LlamaConfig::from_config(config);
  models::Llama model(mc, /*values=*/false);  // shapes only: a 7B summary holds no weights
  return summarize_module("lm", *model, mc.flops_per_token(mc.max_seq_len) * double(mc.max_seq_len),
                          fmt::format("a sequence of {} tokens (model.max_seq_len)", mc.max_seq_len));
}

std::string export_lm_checkpoint(const std::string& checkpoint, const ExportOptions& o) {
  const std::string& out = o.out;
  if (out.size() > 12 && out.compare(out.size() - 12, 12, ".safetensors") == 0) {
    const int64_t n = export_merged(checkpoint, out);
    return fmt::format("export: wrote {} tensors to {} (adapters merged, Hugging Face names)", n, out);
  }
  return export_hf_llama(checkpoint, out, o.dtype, o.max_shard_bytes, o.tokenizer)
      .summary(o.dtype, out, "AutoModelForCausalLM");
}

}  // namespace

const TaskSpec& lm_spec() {
  static const TaskSpec spec = [] {
    TaskSpec s;
    s.name = "lm";
    s.summary = "language-model SFT";
    s.declare = LmTask::declare;
    s.hf_model_type = "llama";
    s.init_config_keys = models::llama_config_keys;
    s.make = make_task<LmTask>;
    s.summarize = summarize_lm;
    s.metrics = {"eval_loss", "eval_perplexity"};
    s.evaluate = LmTask::evaluate;
    s.export_checkpoint = export_lm_checkpoint;
    s.generate = generate_lm;
    s.memory_table = lm_memory_table;
    return s;
  }();
  return spec;
}

}  // namespace meridian::tasks
