#include "meridian/models/llama.h"

#include <torch/nn/functional/activation.h>
#include <torch/nn/init.h>

#include <cmath>

#include "meridian/core/config_binding.h"
#include "meridian/core/config_schema.h"
#include "meridian/core/error.h"
#include "meridian/nn/attention.h"
#include "meridian/nn/shape_only.h"

namespace meridian::models {

namespace {
// The model: keys of a Llama, each bound to its field.
const ConfigBinding<LlamaConfig>& llama_bindings() {
  using S = LlamaConfig;
  static const auto table = [] {
    ConfigBinding<S> b;
    b.integer("model.vocab_size", &S::vocab_size, "vocabulary; raised to the dataset tokenizer's when smaller")
        .at_least(2);
    b.integer("model.dim", &S::dim, "model width; a multiple of model.heads").at_least(1);
    b.integer("model.layers", &S::layers, "decoder blocks").at_least(1);
    b.integer("model.heads", &S::heads, "query heads").at_least(1);
    b.integer("model.kv_heads", &S::kv_heads,
              "key/value heads (grouped-query attention when fewer); divides model.heads")
        .at_least(1)
        .defaults_to("model.heads");
    b.integer("model.hidden", &S::hidden, "SwiGLU inner width").at_least(1);
    b.integer("model.max_seq_len", &S::max_seq_len, "longest sequence (RoPE positions)").at_least(1);
    b.number("model.rope_theta", &S::rope_theta, "RoPE base").above(0);
    b.number("model.norm_eps", &S::norm_eps, "RMSNorm epsilon").above(0);
    b.boolean("model.tie_embeddings", &S::tie_embeddings, "the output head shares the embedding matrix");
    return b;
  }();
  return table;
}
}  // namespace

void LlamaConfig::declare(ConfigSchema& schema) { llama_bindings().declare(schema); }

LlamaConfig LlamaConfig::from_config(const Config& c) {
  LlamaConfig s = llama_bindings().read(c);
  const std::string& f = c.origin();
  if (!c.has("model.kv_heads")) s.kv_heads = s.heads;
  if (s.vocab_size < 2) throw ConfigError(f, "model.vocab_size", "must be at least 2");
  if (s.layers < 1) throw ConfigError(f, "model.layers", "must be at least 1");
  if (s.heads < 1 || s.dim < 1 || s.dim % s.heads != 0)
    throw ConfigError(f, "model.heads", "must be positive and divide model.dim (" + std::to_string(s.dim) + ")");
  if (s.head_dim() % 2 != 0)
    throw ConfigError(f, "model.heads", "the head size dim / heads must be even (rotary pairs)");
  if (s.kv_heads < 1 || s.heads % s.kv_heads != 0)
    throw ConfigError(f, "model.kv_heads", "must be positive and divide model.heads (" + std::to_string(s.heads) + ")");
  if (s.hidden < 1) throw ConfigError(f, "model.hidden", "must be positive");
  if (s.max_seq_len < 1) throw ConfigError(f, "model.max_seq_len", "must be positive");
  if (!(s.rope_theta > 0)) throw ConfigError(f, "model.rope_theta", "must be positive");
  if (!(s.norm_eps > 0)) throw ConfigError(f, "model.norm_eps", "must be positive");
  return s;
}

int64_t LlamaConfig::block_parameter_count() const {
  const int64_t d = head_dim();
  const int64_t attention = dim * heads * d + 2 * dim * kv_heads * d + heads * d * dim;
  const int64_t mlp = 3 * dim * hidden;
  return attention + mlp + 2 * dim;  // two RMSNorm weights
}

int64_t LlamaConfig::parameter_count() const {
  return vocab_size * dim + layers * block_parameter_count() + dim + (tie_embeddings ? 0 : vocab_size * dim);
}

double LlamaConfig::flops_per_token(int64_t seq) const {
  const double d = double(head_dim());
  const double projections = double(dim) * heads * d + 2.0 * dim * kv_heads * d + heads * d * dim;
  const double attention = 2.0 * heads * d * double(seq);  // scores and weighted values, per token
  const double mlp = 3.0 * dim * hidden;
  return 2.0 * (layers * (projections + attention + mlp) + double(dim) * vocab_size);
}

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight_ = register_parameter("weight", at::ones({dim}));
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x) {
  const auto x32 = x.to(at::kFloat);
  const auto normed = x32 * at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return normed.to(x.scalar_type()) * weight_;
}

std::pair<at::Tensor, at::Tensor> rotary_tables(int64_t seq, int64_t head_dim, double theta,
                                                const at::TensorOptions& options) {
  const auto f32 = options.dtype(at::kFloat);
  const auto inv_freq = at::pow(theta, -at::arange(0, head_dim, 2, f32) / double(head_dim));  // [head_dim / 2]
  const auto freqs = at::outer(at::arange(seq, f32), inv_freq);                               // [seq, head_dim / 2]
  const auto emb = at::cat({freqs, freqs}, -1);
  return {emb.cos(), emb.sin()};
}

at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const auto rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos.to(x.scalar_type()) + rotated * sin.to(x.scalar_type());
}

LlamaAttentionImpl::LlamaAttentionImpl(const LlamaConfig& c)
    : heads_(c.heads), kv_heads_(c.kv_heads), head_dim_(c.head_dim()) {
  auto linear = [](int64_t in, int64_t out) { return LoraLinear(in, out); };
  q_proj_ = register_module("q_proj", linear(c.dim, c.heads * head_dim_));
  k_proj_ = register_module("k_proj", linear(c.dim, c.kv_heads * head_dim_));
  v_proj_ = register_module("v_proj", linear(c.dim, c.kv_heads * head_dim_));
  o_proj_ = register_module("o_proj", linear(c.heads * head_dim_, c.dim));
}

at::Tensor LlamaAttentionImpl::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                       at::Tensor* past_keys, at::Tensor* past_values) {
  const int64_t b = x.size(0), t = x.size(1);
  auto q = apply_rotary(q_proj_(x).view({b, t, heads_, head_dim_}).transpose(1, 2), cos, sin);     // [B, H, T, d]
  auto k = apply_rotary(k_proj_(x).view({b, t, kv_heads_, head_dim_}).transpose(1, 2), cos, sin);  // [B, KV, T, d]
  auto v = v_proj_(x).view({b, t, kv_heads_, head_dim_}).transpose(1, 2);
  if (past_keys) {
    if (past_keys->defined()) {  // the cached positions come before x's
      k = at::cat({*past_keys, k}, 2);
      v = at::cat({*past_values, v}, 2);
    }
    *past_keys = k;
    *past_values = v;
  }
  // Query i, at position offset + i after `offset` cached ones, sees keys 0 .. offset + i.
  const auto attn = nn::attention(q, k, v, /*causal=*/true);  // [B, H, T, d]
  return o_proj_(attn.transpose(1, 2).reshape({b, t, heads_ * head_dim_}));
}

LlamaMlpImpl::LlamaMlpImpl(const LlamaConfig& c) {
  auto linear = [](int64_t in, int64_t out) { return LoraLinear(in, out); };
  gate_proj_ = register_module("gate_proj", linear(c.dim, c.hidden));
  up_proj_ = register_module("up_proj", linear(c.dim, c.hidden));
  down_proj_ = register_module("down_proj", linear(c.hidden, c.dim));
}

at::Tensor LlamaMlpImpl::forward(const at::Tensor& x) {
  return down_proj_(torch::nn::functional::silu(gate_proj_(x)) * up_proj_(x));
}

LlamaBlockImpl::LlamaBlockImpl(const LlamaConfig& c) {
  self_attn_ = register_module("self_attn", LlamaAttention(c));
  mlp_ = register_module("mlp", LlamaMlp(c));
  input_layernorm_ = register_module("input_layernorm", RMSNorm(c.dim, c.norm_eps));
  post_attention_layernorm_ = register_module("post_attention_layernorm", RMSNorm(c.dim, c.norm_eps));
}

at::Tensor LlamaBlockImpl::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                   at::Tensor* past_keys, at::Tensor* past_values) {
  const auto h = x + self_attn_->forward(input_layernorm_(x), cos, sin, past_keys, past_values);
  return h + mlp_(post_attention_layernorm_(h));
}

LlamaModelImpl::LlamaModelImpl(const LlamaConfig& c, bool values) : config_(c) {
  embed_tokens_ = register_module("embed_tokens", torch::nn::Embedding(c.vocab_size, c.dim));
  if (!values) nn::drop_parameter_values(*embed_tokens_);
  layers_ = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.layers; ++i) {
    LlamaBlock block(c);
    if (!values) nn::drop_parameter_values(*block);
    layers_->push_back(block);
    blocks_.add(block.ptr());
  }
  norm_ = register_module("norm", RMSNorm(c.dim, c.norm_eps));
  if (!values) {
    nn::drop_parameter_values(*norm_);
    return;
  }
  // Small initial weights (as HF's initializer_range 0.02) keep the first logits near uniform.
  for (auto& p : parameters())
    if (p.dim() == 2) torch::nn::init::normal_(p, 0.0, 0.02);
}

at::Tensor LlamaModelImpl::forward(const at::Tensor& tokens, KvCache* cache) {
  const int64_t t = tokens.size(1), offset = cache ? cache->length : 0;
  if (offset + t > config_.max_seq_len)
    throw std::invalid_argument("llama: sequence of " + std::to_string(offset + t) +
                                " tokens exceeds model.max_seq_len " + std::to_string(config_.max_seq_len));
  auto x = embed_tokens_(tokens);
  auto [cos, sin] = rotary_tables(offset + t, config_.head_dim(), config_.rope_theta, x.options());
  cos = cos.narrow(0, offset, t), sin = sin.narrow(0, offset, t);
  if (cache && cache->keys.empty())
    cache->keys.resize(size_t(config_.layers)), cache->values.resize(size_t(config_.layers));
  for (size_t i = 0; i < layers_->size(); ++i) {
    auto* layer = layers_[i]->as<LlamaBlock>();
    at::Tensor* keys = cache ? &cache->keys[i] : nullptr;
    at::Tensor* values = cache ? &cache->values[i] : nullptr;
    x = blocks_.run(i, x, [layer, keys, values, c = cos, s = sin](const at::Tensor& h) {
      return layer->forward(h, c, s, keys, values);
    });
  }
  if (cache) cache->length += t;
  return norm_(x);
}

LlamaImpl::LlamaImpl(const LlamaConfig& config, bool values) : config_(config) {
  model_ = register_module("model", LlamaModel(config, values));
  if (!config.tie_embeddings)
    lm_head_ = register_module("lm_head",
                               torch::nn::Linear(torch::nn::LinearOptions(config.dim, config.vocab_size).bias(false)));
  if (!lm_head_) return;
  if (values)
    torch::nn::init::normal_(lm_head_->weight, 0.0, 0.02);
  else
    nn::drop_parameter_values(*lm_head_);
}

at::Tensor LlamaImpl::forward(const at::Tensor& tokens, KvCache* cache) {
  const auto h = model_->forward(tokens, cache);
  return lm_head_ ? lm_head_(h) : at::matmul(h, model_->embed_tokens()->weight.t());
}

}  // namespace meridian::models
