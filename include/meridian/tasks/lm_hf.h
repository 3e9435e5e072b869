// Llama in and out of Hugging Face's layout (docs/running.md, "Fine-tune a published Llama"): the
// weights of a LlamaForCausalLM directory into a model, tensor by tensor, and an lm checkpoint
// written as a directory transformers loads with AutoModelForCausalLM.from_pretrained (and vLLM and
// llama.cpp's convert_hf_to_gguf.py take). Training from such a directory is LmTask's task.init.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "meridian/models/hf_checkpoint.h"
#include "meridian/models/llama.h"
#include "meridian/tasks/hf_export.h"

namespace meridian::tasks {

// Not collective: the weights of a Hugging Face LlamaForCausalLM directory (sharded or not) or of one
// .safetensors file with its names into `model`, read tensor by tensor (models::open_hf_checkpoint,
// then load_into's checks: every parameter provided, no tensor left over, shapes equal). Each
// parameter's data is replaced by a new tensor of `dtype` on `device` holding the file's values, so
// `model` may be built shape-only (models::LlamaImpl(config, false)) and the whole model never
// exists in another dtype or place (LoRA's frozen base straight in bfloat16 on the GPU).
// rotary_emb.inv_freq buffers, and lm_head.weight of a tied model, are skipped with a notice when
// `report`. DataError naming the file and tensor otherwise.
void load_hf_llama(models::LlamaImpl& model, const std::string& path, at::ScalarType dtype, c10::Device device,
                   bool report);

// load_hf_llama in two halves, for a model built without values (models::LlamaImpl(config, false):
// shape-only parameters) whose weights go straight into ZeRO-3's shards. Not collective.
class HfLlamaWeights {
 public:
  // Opens `path` and checks it against `model`'s names and shapes (load_hf_llama's DataErrors);
  // reads no tensor data.
  HfLlamaWeights(models::LlamaImpl& model, const std::string& path);
  // Copies the tensor that provides parameter `name` (the model's name) into `value` (converted to
  // its dtype and device), reading only that tensor. std::out_of_range for a name the model lacks.
  void read(const std::string& name, const at::Tensor& value) const;
  size_t size() const { return matched_.size(); }
  // Rank 0's notices: what was skipped, and `count` tensors loaded `how`.
  void report(size_t count, const std::string& how) const;

 private:
  std::string path_;
  models::HfCheckpoint checkpoint_;
  std::map<std::string, const models::LazyTensor*> matched_;  // into checkpoint_.tensors
  int64_t buffers_ = 0, head_ = 0, bytes_ = 0;                // skipped; the file's bytes
};

// Not collective. Writes the lm checkpoint `checkpoint` (LoRA adapters merged: models::merged_weights)
// as a directory: config.json (models::llama_hf_config, bos/eos of the tokenizer),
// generation_config.json, the weights in `dtype` ("f32" or "bf16") as model.safetensors or shards of
// at most `max_shard_bytes` with model.safetensors.index.json, and the tokenizer: tokenizer.model,
// tokenizer_config.json, special_tokens_map.json (and generation_config.json) copied from
// `tokenizer` (a Hugging Face directory; default: the run's task.init when it is one) or written
// from the training dataset's tokenizer (LlamaTokenizer, legacy: the text encoded as SentencePiece
// does). Written through HfExportDir (<out>.partial, removed on any failure, renamed at the end).
// UserError when `out` or <out>.partial exists or no tokenizer is found.
HfExport export_hf_llama(const std::string& checkpoint, const std::string& out, const std::string& dtype,
                         int64_t max_shard_bytes, const std::string& tokenizer);

}  // namespace meridian::tasks
