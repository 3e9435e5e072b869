#include "meridian/models/siglip.h"

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/normalization.h>
#include <torch/nn/init.h>

#include <cmath>

#include "meridian/core/config_schema.h"
#include "meridian/core/error.h"
#include "meridian/parallel/ddp.h"

namespace meridian::models {

namespace {
TowerConfig tower(const Config& c, const std::string& prefix, TowerConfig d) {
  d.width = c.get<int64_t>(prefix + ".width", d.width);
  d.depth = c.get<int64_t>(prefix + ".depth", d.depth);
  d.heads = c.get<int64_t>(prefix + ".heads", d.heads);
  d.mlp_ratio = c.get<double>(prefix + ".mlp_ratio", d.mlp_ratio);
  if (d.width < 1 || d.depth < 1 || d.heads < 1 || d.width % d.heads != 0)
    throw ConfigError(c.origin(), prefix, "width must be a positive multiple of heads, depth and heads positive");
  if (d.mlp_ratio <= 0) throw ConfigError(c.origin(), prefix + ".mlp_ratio", "must be positive");
  return d;
}

// 2 x multiply-adds of a block on T tokens of width W.
double block_flops(double t, const TowerConfig& c) {
  const double w = double(c.width);
  return 2 * (t * w * 3 * w + 2 * t * t * w + t * w * w + 2 * t * w * w * c.mlp_ratio);
}
}  // namespace

void SiglipConfig::declare(ConfigSchema& schema) {
  const SiglipConfig d;
  schema
      .integer("model.image_size", d.image_size, "input image side in pixels (the dataset's images are resized to it)")
      .at_least(1);
  schema.integer("model.patch", d.patch, "ViT patch side in pixels; divides model.image_size").at_least(1);
  for (const auto& [tower, t] : {std::pair<std::string, TowerConfig>{"vision", d.vision}, {"text", d.text}}) {
    const std::string p = "model." + tower;
    schema.integer(p + ".width", t.width, tower + " tower width; a multiple of its heads").at_least(1);
    schema.integer(p + ".depth", t.depth, tower + " tower blocks").at_least(1);
    schema.integer(p + ".heads", t.heads, tower + " tower attention heads").at_least(1);
    schema.number(p + ".mlp_ratio", t.mlp_ratio, tower + " tower MLP width / its width").above(0);
  }
  schema
      .integer("model.context_length", d.context_length, "caption tokens the text tower reads (at most the dataset's)")
      .at_least(2);
  schema.integer("model.vocab_size", d.vocab_size, "text vocabulary; raised to the dataset tokenizer's when smaller")
      .at_least(2);
  schema.integer("model.embed", d.embed, "shared embedding width").at_least(1);
}

SiglipConfig SiglipConfig::from_config(const Config& c) {
  SiglipConfig s;
  s.image_size = c.get<int64_t>("model.image_size", s.image_size);
  s.patch = c.get<int64_t>("model.patch", s.patch);
  s.vision = tower(c, "model.vision", s.vision);
  s.text = tower(c, "model.text", s.text);
  s.context_length = c.get<int64_t>("model.context_length", s.context_length);
  s.vocab_size = c.get<int64_t>("model.vocab_size", s.vocab_size);
  s.embed = c.get<int64_t>("model.embed", s.embed);
  if (s.patch < 1 || s.image_size % s.patch != 0)
    throw ConfigError(c.origin(), "model.patch", "must divide model.image_size (" + std::to_string(s.image_size) + ")");
  if (s.context_length < 2) throw ConfigError(c.origin(), "model.context_length", "must be at least 2");
  if (s.vocab_size < 2) throw ConfigError(c.origin(), "model.vocab_size", "must be at least 2");
  if (s.embed < 1) throw ConfigError(c.origin(), "model.embed", "must be positive");
  return s;
}

double SiglipConfig::flops_per_sample() const {
  const double patches = double(image_size / patch) * double(image_size / patch);
  double f = 2 * patches * double(patch * patch * 3) * double(vision.width);  // patch embedding
  f += double(vision.depth) * block_flops(patches, vision) + 2 * double(vision.width) * double(embed);
  f += double(text.depth) * block_flops(double(context_length), text) + 2 * double(text.width) * double(embed);
  return f;
}

BlockImpl::BlockImpl(int64_t width, int64_t heads, double mlp_ratio) : heads_(heads) {
  const int64_t hidden = std::max<int64_t>(1, std::llround(width * mlp_ratio));
  ln1_ = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})));
  qkv_ = register_module("qkv", torch::nn::Linear(width, 3 * width));
  proj_ = register_module("proj", torch::nn::Linear(width, width));
  ln2_ = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})));
  fc1_ = register_module("fc1", torch::nn::Linear(width, hidden));
  fc2_ = register_module("fc2", torch::nn::Linear(hidden, width));
}

at::Tensor BlockImpl::forward(const at::Tensor& x, const at::Tensor& key_padding) {
  const int64_t b = x.size(0), t = x.size(1), w = x.size(2), d = w / heads_;
  // Heads folded into the batch ([B H, T, D], one copy) so that the scores are one batched GEMM
  // with the scale (and the padding as an additive bias) applied inside it, as PyTorch's
  // MultiheadAttention does, instead of 4-D matmuls on the permuted view, a division and a masked
  // copy of the [B, H, T, T] scores (the same ATen ops timed from Python: 15-25 % less time for
  // this attention; in training, bf16 gained, float32 stayed within noise: docs/performance.md).
  const auto qkv = qkv_(ln1_(x)).view({b, t, 3, heads_, d}).permute({2, 0, 3, 1, 4}).reshape({3, b * heads_, t, d});
  const auto q = qkv[0], k = qkv[1], v = qkv[2];
  const double scale = 1.0 / std::sqrt(double(d));
  at::Tensor scores;  // [B H, T, T]
  if (key_padding.defined()) {
    const auto bias = at::zeros({b, 1, t}, q.options())
                          .masked_fill_(key_padding.view({b, 1, t}), -1e9)
                          .repeat_interleave(heads_, 0);  // [B H, 1, T], broadcast over the queries
    scores = at::baddbmm(bias, q, k.transpose(1, 2), 1.0, scale);
  } else {
    scores = at::bmm(q * scale, k.transpose(1, 2));
  }
  auto attn = at::bmm(at::softmax(scores, -1), v).view({b, heads_, t, d}).transpose(1, 2).reshape({b, t, w});
  auto y = x + proj_(attn);
  return y + fc2_(torch::nn::functional::gelu(fc1_(ln2_(y))));
}

SiglipImpl::SiglipImpl(const SiglipConfig& c) : config_(c) {
  const int64_t grid = c.image_size / c.patch;
  patch_embed_ = register_module(
      "patch_embed", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, c.vision.width, c.patch).stride(c.patch)));
  vision_pos_ = register_parameter("vision_pos", at::randn({1, grid * grid, c.vision.width}) * 0.02);
  vision_blocks_ = register_module("vision_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.vision.depth; ++i) {
    Block block(c.vision.width, c.vision.heads, c.vision.mlp_ratio);
    vision_blocks_->push_back(block);
    blocks_.add(block.ptr());
  }
  vision_ln_ = register_module("vision_ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.vision.width})));
  vision_proj_ =
      register_module("vision_proj", torch::nn::Linear(torch::nn::LinearOptions(c.vision.width, c.embed).bias(false)));
  token_embed_ = register_module("token_embed", torch::nn::Embedding(c.vocab_size, c.text.width));
  text_pos_ = register_parameter("text_pos", at::randn({1, c.context_length, c.text.width}) * 0.01);
  text_blocks_ = register_module("text_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.text.depth; ++i) {
    Block block(c.text.width, c.text.heads, c.text.mlp_ratio);
    text_blocks_->push_back(block);
    blocks_.add(block.ptr());
  }
  text_ln_ = register_module("text_ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.text.width})));
  text_proj_ =
      register_module("text_proj", torch::nn::Linear(torch::nn::LinearOptions(c.text.width, c.embed).bias(false)));
  logit_scale_ = register_parameter("logit_scale", at::full({1}, std::log(10.0)));
  logit_bias_ = register_parameter("logit_bias", at::full({1}, -10.0));
}

at::Tensor SiglipImpl::encode_images(const at::Tensor& images) {
  auto x = patch_embed_(images).flatten(2).transpose(1, 2) + vision_pos_;  // [B, P, W]
  for (size_t i = 0; i < vision_blocks_->size(); ++i) {
    auto* block = vision_blocks_[i]->as<Block>();
    x = blocks_.run(i, x, [block](const at::Tensor& h) { return block->forward(h); });
  }
  x = vision_ln_(x).mean(1);  // mean-pooled patches
  return torch::nn::functional::normalize(vision_proj_(x), torch::nn::functional::NormalizeFuncOptions().dim(-1));
}

at::Tensor SiglipImpl::encode_text(const at::Tensor& tokens, const at::Tensor& lengths) {
  const int64_t b = tokens.size(0), t = tokens.size(1);
  auto x = token_embed_(tokens) + text_pos_.narrow(1, 0, t);
  const auto positions = at::arange(t, tokens.options().dtype(at::kLong)).unsqueeze(0);
  const auto padding = positions >= lengths.to(at::kLong).unsqueeze(1);  // [B, T]
  const size_t first = vision_blocks_->size();  // text blocks follow the vision blocks in blocks_
  for (size_t i = 0; i < text_blocks_->size(); ++i) {
    auto* block = text_blocks_[i]->as<Block>();
    x = blocks_.run(first + i, x, [block, padding](const at::Tensor& h) { return block->forward(h, padding); });
  }
  x = text_ln_(x);
  const auto last = (lengths.to(at::kLong) - 1).clamp_min(0).view({b, 1, 1}).expand({b, 1, x.size(2)});
  x = x.gather(1, last).squeeze(1);  // the eos token
  return torch::nn::functional::normalize(text_proj_(x), torch::nn::functional::NormalizeFuncOptions().dim(-1));
}

int64_t parameter_count(torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters()) n += p.numel();
  return n;
}

at::Tensor siglip_loss(const at::Tensor& image_embeddings, const at::Tensor& text_embeddings, const at::Tensor& scale,
                       const at::Tensor& bias, comm::Communicator* comm) {
  const int64_t b = image_embeddings.size(0);
  const at::Tensor texts = comm ? parallel::all_gather_with_grad(*comm, text_embeddings) : text_embeddings;
  const int64_t first = comm ? int64_t(comm->rank()) * b : 0;
  const auto logits = at::matmul(image_embeddings, texts.t()) * scale.exp() + bias;  // [b, N b]
  auto labels = -at::ones_like(logits);
  labels.narrow(1, first, b).fill_diagonal_(1.0);
  return -at::log_sigmoid(labels * logits).sum() / double(b);
}

at::Tensor clip_loss(const at::Tensor& image_embeddings, const at::Tensor& text_embeddings, const at::Tensor& scale,
                     comm::Communicator* comm) {
  const int64_t b = image_embeddings.size(0);
  const at::Tensor all_texts = comm ? parallel::all_gather_with_grad(*comm, text_embeddings) : text_embeddings;
  const at::Tensor all_images = comm ? parallel::all_gather_with_grad(*comm, image_embeddings) : image_embeddings;
  const int64_t first = comm ? int64_t(comm->rank()) * b : 0;
  const auto targets = at::arange(first, first + b, image_embeddings.options().dtype(at::kLong));
  const auto image_to_text = at::matmul(image_embeddings, all_texts.t()) * scale.exp();  // [b, N b]
  const auto text_to_image = at::matmul(text_embeddings, all_images.t()) * scale.exp();
  return 0.5 * (at::cross_entropy_loss(image_to_text, targets) + at::cross_entropy_loss(text_to_image, targets));
}

}  // namespace meridian::models
