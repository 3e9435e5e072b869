// Llama in Hugging Face's layout (transformers' LlamaForCausalLM, e.g. meta-llama/Llama-2-7b-hf):
// config.json's fields as LlamaConfig's model: keys and back, and which stored tensors are not
// weights. The parameter names are already HF's (llama.h), so weights load by name.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "meridian/models/hf_checkpoint.h"
#include "meridian/models/llama.h"

namespace meridian::models {

// Not collective. The model: keys a LlamaForCausalLM config.json sets, with transformers'
// LlamaConfig defaults for absent fields: hidden_size (model.dim), intermediate_size (model.hidden),
// num_hidden_layers, num_attention_heads, num_key_value_heads (default: the heads), rope_theta
// (10000; transformers 5 writes rope_parameters.rope_theta instead), rms_norm_eps (1e-6),
// tie_word_embeddings (false), vocab_size (32000), max_position_embeddings (2048). DataError naming
// `origin` and the field for another model_type, a field that is not a number (a boolean), and what
// this Llama does not compute: hidden_act other than silu, rope_scaling or a rope_parameters.rope_type
// other than default, attention_bias or mlp_bias true, a head_dim other than hidden_size / heads.
std::vector<HfConfigKey> llama_config_keys(const nlohmann::json& config, const std::string& origin);

// The config.json transformers reads back as LlamaForCausalLM for `config` (architectures,
// model_type, torch_dtype, every field above, hidden_act silu, bos/eos token ids; -1: omitted).
nlohmann::json llama_hf_config(const LlamaConfig& config, const std::string& torch_dtype, int bos_id, int eos_id);

// True for a stored tensor that is a buffer transformers recomputes (model.layers.<i>.self_attn.
// rotary_emb.inv_freq in older checkpoints): skipped on load, with a notice.
bool llama_skipped_tensor(const std::string& name);

}  // namespace meridian::models
