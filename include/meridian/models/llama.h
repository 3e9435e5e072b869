// Llama-style decoder-only language model: token embedding, pre-norm blocks (RMSNorm, causal
// multi-head attention with rotary position embedding and optional grouped-query heads, SwiGLU MLP),
// a final RMSNorm and an output head (tied to the embedding or not).
//
// Module and parameter names follow the Hugging Face Llama layout (model.embed_tokens.weight,
// model.layers.<i>.self_attn.{q,k,v,o}_proj.weight, model.layers.<i>.mlp.{gate,up,down}_proj.weight,
// model.layers.<i>.{input,post_attention}_layernorm.weight, model.norm.weight, lm_head.weight), and
// the rotary embedding uses its rotate-half convention, so HF safetensors weights load by name with
// models::load_into and no permutation.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>

#include "meridian/models/lora.h"
#include "meridian/nn/blocks.h"

namespace meridian {
class Config;
class ConfigSchema;
}  // namespace meridian

namespace meridian::models {

struct LlamaConfig {
  int64_t vocab_size = 32000;
  int64_t dim = 4096;  // model width
  int64_t layers = 32;
  int64_t heads = 32;      // query heads; head size = dim / heads
  int64_t kv_heads = 32;   // key/value heads (grouped-query attention when < heads; divides heads)
  int64_t hidden = 11008;  // SwiGLU inner width
  int64_t max_seq_len = 4096;
  double rope_theta = 10000;
  double norm_eps = 1e-5;
  bool tie_embeddings = false;  // output head shares the embedding matrix

  // From the `model:` section (jobs/configs/lm-*.yaml, llama-7b.yaml); ConfigError names the field.
  static LlamaConfig from_config(const Config& config);
  // Declares the model: keys (types, defaults from this struct, meanings).
  static void declare(ConfigSchema& schema);
  int64_t head_dim() const { return dim / heads; }
  // Closed form, without building the model (the 7b preset: 6,738,415,616 as Llama-2-7B).
  int64_t parameter_count() const;
  // One decoder layer's parameters (attention, MLP, two norms): ZeRO-3's unit.
  int64_t block_parameter_count() const;
  // Forward FLOPs per token at sequence length `seq` (2 x multiply-adds, attention included).
  double flops_per_token(int64_t seq) const;
};

// x / sqrt(mean(x^2) + eps) * weight, over the last dimension, computed in float32.
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  at::Tensor forward(const at::Tensor& x);

 private:
  at::Tensor weight_;
  double eps_;
};
TORCH_MODULE(RMSNorm);

// Keys and values of the positions seen so far, per layer, for incremental decoding: a forward with
// a cache takes only the new tokens, at positions length .. length + T - 1, and appends theirs.
// Not thread-safe; one sequence batch per cache.
struct KvCache {
  std::vector<at::Tensor> keys, values;  // per layer [B, kv_heads, length, head_dim] (after RoPE)
  int64_t length = 0;                    // positions cached
  void clear() { keys.clear(), values.clear(), length = 0; }
};

class LlamaAttentionImpl : public torch::nn::Module {
 public:
  explicit LlamaAttentionImpl(const LlamaConfig& c);
  // x [B, T, D]; cos/sin [T, head_dim] of x's positions. Causal. With `past` (this layer's entries
  // of a KvCache, possibly empty tensors), x's queries also attend to the cached positions, and
  // x's keys and values are appended to them.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, at::Tensor* past_keys = nullptr,
                     at::Tensor* past_values = nullptr);

 private:
  int64_t heads_, kv_heads_, head_dim_;
  LoraLinear q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr}, o_proj_{nullptr};  // LoRA-capable
};
TORCH_MODULE(LlamaAttention);

class LlamaMlpImpl : public torch::nn::Module {
 public:
  explicit LlamaMlpImpl(const LlamaConfig& c);
  at::Tensor forward(const at::Tensor& x);  // down(silu(gate(x)) * up(x))

 private:
  LoraLinear gate_proj_{nullptr}, up_proj_{nullptr}, down_proj_{nullptr};
};
TORCH_MODULE(LlamaMlp);

class LlamaBlockImpl : public torch::nn::Module {
 public:
  explicit LlamaBlockImpl(const LlamaConfig& c);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, at::Tensor* past_keys = nullptr,
                     at::Tensor* past_values = nullptr);

 private:
  RMSNorm input_layernorm_{nullptr}, post_attention_layernorm_{nullptr};
  LlamaAttention self_attn_{nullptr};
  LlamaMlp mlp_{nullptr};
};
TORCH_MODULE(LlamaBlock);

// The decoder stack without the head (HF's "model.").
class LlamaModelImpl : public torch::nn::Module {
 public:
  // values false: every parameter shape-only (nn::shape_only), dropped block by block as it is
  // built, so building holds one block at most; the values are written elsewhere (ZeRO-3's shards).
  explicit LlamaModelImpl(const LlamaConfig& c, bool values = true);
  // [B, T] int64 -> hidden states [B, T, D]. With a cache: the tokens follow the cached positions
  // (cache->length + T <= max_seq_len, else std::invalid_argument), and the cache grows by T.
  at::Tensor forward(const at::Tensor& tokens, KvCache* cache = nullptr);
  torch::nn::Embedding& embed_tokens() { return embed_tokens_; }
  // The decoder layers, in order (activation checkpointing, ZeRO-3).
  nn::BlockRunner& blocks() { return blocks_; }

 private:
  LlamaConfig config_;
  nn::BlockRunner blocks_;
  torch::nn::Embedding embed_tokens_{nullptr};
  torch::nn::ModuleList layers_{nullptr};
  RMSNorm norm_{nullptr};
};
TORCH_MODULE(LlamaModel);

class LlamaImpl : public torch::nn::Module {
 public:
  // values false: shape-only parameters, as LlamaModelImpl's.
  explicit LlamaImpl(const LlamaConfig& config, bool values = true);
  // tokens [B, T] int64 (T <= max_seq_len) -> logits [B, T, vocab]. With a cache: see
  // LlamaModelImpl::forward (the logits equal those of a forward over the whole sequence).
  at::Tensor forward(const at::Tensor& tokens, KvCache* cache = nullptr);
  const LlamaConfig& config() const { return config_; }
  nn::BlockRunner& blocks() { return model_->blocks(); }

 private:
  LlamaConfig config_;
  LlamaModel model_{nullptr};
  torch::nn::Linear lm_head_{nullptr};  // null when tied
};
TORCH_MODULE(Llama);

// Rotary embedding tables for positions [0, seq): cos and sin [seq, head_dim] (rotate-half layout:
// frequencies repeated for both halves).
std::pair<at::Tensor, at::Tensor> rotary_tables(int64_t seq, int64_t head_dim, double theta,
                                                const at::TensorOptions& options);
// x [..., T, head_dim] rotated by position: x * cos + rotate_half(x) * sin.
at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace meridian::models
