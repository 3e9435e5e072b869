#include "meridian/models/siglip.h"

#include <fmt/format.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/normalization.h>
#include <torch/nn/init.h>

#include <cmath>

#include "meridian/core/config_binding.h"
#include "meridian/core/config_schema.h"
#include "meridian/core/error.h"
#include "meridian/nn/attention.h"
#include "meridian/nn/autocast.h"
#include "meridian/parallel/ddp.h"

namespace meridian::models {

namespace {
// The checks of a tower's values that its keys' ranges do not cover (width a multiple of heads).
void check_tower(const Config& c, const std::string& prefix, const TowerConfig& d) {
  if (d.width < 1 || d.depth < 1 || d.heads < 1 || d.width % d.heads != 0)
    throw ConfigError(c.origin(), prefix, "width must be a positive multiple of heads, depth and heads positive");
  if (d.mlp_ratio <= 0) throw ConfigError(c.origin(), prefix + ".mlp_ratio", "must be positive");
  if (d.intermediate < 0) throw ConfigError(c.origin(), prefix + ".intermediate", "must be 0 or positive");
  if (d.layer_norm_eps <= 0) throw ConfigError(c.origin(), prefix + ".layer_norm_eps", "must be positive");
}

// 2 x multiply-adds of an encoder layer on T tokens: q, k, v, out projections, scores and their
// weighted sum, the MLP.
double block_flops(double t, const TowerConfig& c) {
  const double w = double(c.width), h = double(c.mlp_width());
  return 2 * (4 * t * w * w + 2 * t * t * w + 2 * t * w * h);
}

// Shortest text that reads back as the same double (1e-06, 0.5).
std::string fmt_number(double v) { return fmt::format("{}", v); }

// In float32 for a bf16 input on a CPU: LibTorch 1.13's bf16 GELU kernel there was 2-3x slower than
// the float one (SigLIP tiny's bf16 step 20-35 % faster this way). On 2.15 the two paths are within
// 5 % (docs/performance.md, "PyTorch 2.15 with CUDA"); the float32 one stays, for its rounding.
at::Tensor gelu_tanh(const at::Tensor& x) {
  if (x.scalar_type() != at::kBFloat16 || !x.is_cpu()) return at::gelu(x, "tanh");
  return at::gelu(x.to(at::kFloat), "tanh").to(at::kBFloat16);
}

torch::nn::LayerNorm layer_norm(int64_t width, double eps) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({width}).eps(eps));
}

// Heads split off, as a view: [B, T, H D] -> [B, H, T, D].
at::Tensor split_heads(const at::Tensor& x, int64_t heads) {
  const int64_t b = x.size(0), t = x.size(1), d = x.size(2) / heads;
  return x.view({b, t, heads, d}).transpose(1, 2);
}

// softmax(q k^T / sqrt(d)) v per head (nn::attention: SDPA, or the explicit product with the softmax
// in float32 for bf16 on a CPU); q [B, H, Tq, D], k and v [B, H, T, D] -> [B, Tq, H D].
at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t b = q.size(0), heads = q.size(1), tq = q.size(2), d = q.size(3);
  return nn::attention(q, k, v, /*causal=*/false).transpose(1, 2).reshape({b, tq, heads * d});
}

// Hugging Face's initialisation of SiglipModel (_init_weights), so that training from scratch starts
// as transformers would: lecun-normal patches, 1/sqrt(W) position and token embeddings, Xavier
// projections with zero biases, MLP biases ~N(0, 1e-6).
// Normal with std 1/sqrt(fan_in), drawn again beyond 2 standard deviations, scaled so that the
// truncated distribution keeps that std (its constant 0.8796 is the std of N(0, 1) cut at +-2).
void lecun_normal_(const at::Tensor& weight, double fan_in) {
  at::NoGradGuard no_grad;
  auto x = at::randn(weight.sizes());
  for (auto out = x.abs() > 2; out.any().item<bool>(); out = x.abs() > 2)
    x.masked_scatter_(out, at::randn({out.sum().item<int64_t>()}));
  weight.copy_(x * (1.0 / std::sqrt(fan_in) / 0.87962566103423978));
}

void init_linear(torch::nn::Linear& l, double bias_std = 0) {
  torch::nn::init::xavier_uniform_(l->weight);
  if (bias_std > 0)
    torch::nn::init::normal_(l->bias, 0, bias_std);
  else
    torch::nn::init::zeros_(l->bias);
}
}  // namespace

int64_t TowerConfig::mlp_width() const {
  return intermediate > 0 ? intermediate : std::max<int64_t>(1, std::llround(double(width) * mlp_ratio));
}

namespace {
// The model: keys of SigLIP, each bound to its field (the towers' through accessors).
const ConfigBinding<SiglipConfig>& siglip_bindings() {
  using S = SiglipConfig;
  static const auto table = [] {
    ConfigBinding<S> b;
    b.integer("model.image_size", &S::image_size, "input image side in pixels (the dataset's images are resized to it)")
        .at_least(1);
    b.integer("model.patch", &S::patch,
              "ViT patch side in pixels, at most model.image_size (a remainder is left out, as a stride-patch "
              "convolution does: 384 px in patches of 14 gives 27 x 27)")
        .at_least(1);
    for (const auto& [name, member] :
         {std::pair<std::string, TowerConfig S::*>{"vision", &S::vision}, {"text", &S::text}}) {
      const std::string p = "model." + name;
      const auto in = [member = member](auto field) {
        return [ member, field ](S & s) -> auto& { return (s.*member).*field; };
      };
      b.integer(p + ".width", in(&TowerConfig::width), name + " tower width (hidden_size); a multiple of its heads")
          .at_least(1);
      b.integer(p + ".depth", in(&TowerConfig::depth), name + " tower layers (num_hidden_layers)").at_least(1);
      b.integer(p + ".heads", in(&TowerConfig::heads), name + " tower attention heads").at_least(1);
      b.number(p + ".mlp_ratio", in(&TowerConfig::mlp_ratio),
               name + " tower MLP width / its width (when intermediate is 0)")
          .above(0);
      b.integer(p + ".intermediate", in(&TowerConfig::intermediate),
                name + " tower MLP width (intermediate_size); 0: width x mlp_ratio")
          .at_least(0);
      b.number(p + ".layer_norm_eps", in(&TowerConfig::layer_norm_eps), name + " tower LayerNorm epsilon").above(0);
    }
    b.integer("model.context_length", &S::context_length,
              "caption tokens the text tower reads (max_position_embeddings); captions are padded to it")
        .at_least(2);
    b.integer("model.vocab_size", &S::vocab_size, "text vocabulary; raised to the dataset tokenizer's when smaller")
        .at_least(2);
    b.integer("model.embed", &S::embed, "shared embedding width: the vision width (the text head projects to it)")
        .at_least(1)
        .defaults_to("model.vision.width");
    return b;
  }();
  return table;
}
}  // namespace

void SiglipConfig::declare(ConfigSchema& schema) { siglip_bindings().declare(schema); }

SiglipConfig SiglipConfig::from_config(const Config& c) {
  SiglipConfig s = siglip_bindings().read(c);
  check_tower(c, "model.vision", s.vision);
  check_tower(c, "model.text", s.text);
  if (!c.has("model.embed")) s.embed = s.vision.width;
  if (s.patch < 1 || s.patch > s.image_size)
    throw ConfigError(c.origin(), "model.patch",
                      "must be at most model.image_size (" + std::to_string(s.image_size) + ")");
  if (s.context_length < 2) throw ConfigError(c.origin(), "model.context_length", "must be at least 2");
  if (s.vocab_size < 2) throw ConfigError(c.origin(), "model.vocab_size", "must be at least 2");
  if (s.embed != s.vision.width)
    throw ConfigError(c.origin(), "model.embed",
                      "must equal model.vision.width (" + std::to_string(s.vision.width) +
                          "): SigLIP's image embedding is the vision tower's pooled output");
  return s;
}

double SiglipConfig::flops_per_sample() const {
  const double patches = double(image_size / patch) * double(image_size / patch);
  const double w = double(vision.width), h = double(vision.mlp_width());
  double f = 2 * patches * double(patch * patch * 3) * w;  // patch embedding
  f += double(vision.depth) * block_flops(patches, vision);
  f += 2 * (w * w + 2 * patches * w * w + 2 * patches * w + w * w + 2 * w * h);  // the attention-pooling head
  f += double(text.depth) * block_flops(double(context_length), text) + 2 * double(text.width) * double(embed);
  return f;
}

int64_t SiglipConfig::parameter_count() const {
  const auto layer = [](const TowerConfig& t) {  // q, k, v, out; the MLP; two layer norms
    const int64_t w = t.width, h = t.mlp_width();
    return 4 * (w * w + w) + (w * h + h) + (h * w + w) + 4 * w;
  };
  const int64_t vw = vision.width, vh = vision.mlp_width(), tw = text.width, grid = image_size / patch;
  const int64_t head = vw + (3 * vw * vw + 3 * vw) + (vw * vw + vw) + 2 * vw + (2 * vw * vh + vh + vw);
  const int64_t vision_params =
      (3 * patch * patch * vw + vw) + grid * grid * vw + vision.depth * layer(vision) + 2 * vw + head;
  const int64_t text_params =
      vocab_size * tw + context_length * tw + text.depth * layer(text) + 2 * tw + (tw * embed + embed);
  return vision_params + text_params + 2;
}

SelfAttentionImpl::SelfAttentionImpl(int64_t width, int64_t heads) : heads_(heads) {
  for (const auto& [name, l] : {std::pair<const char*, torch::nn::Linear*>{"q_proj", &q_proj_},
                                {"k_proj", &k_proj_},
                                {"v_proj", &v_proj_},
                                {"out_proj", &out_proj_}}) {
    *l = register_module(name, torch::nn::Linear(width, width));
    init_linear(*l);
  }
}

at::Tensor SelfAttentionImpl::forward(const at::Tensor& x) {
  // One GEMM for q, k and v: the three weights side by side (a copy of 3 W^2 values per call, small
  // next to the activations) instead of three GEMMs on the same input.
  const int64_t w = x.size(2);
  const auto qkv = at::linear(x, at::cat({q_proj_->weight, k_proj_->weight, v_proj_->weight}),
                              at::cat({q_proj_->bias, k_proj_->bias, v_proj_->bias}));
  const auto parts = qkv.split(w, -1);
  return out_proj_(attend(split_heads(parts[0], heads_), split_heads(parts[1], heads_), split_heads(parts[2], heads_)));
}

MlpImpl::MlpImpl(int64_t width, int64_t hidden) {
  fc1_ = register_module("fc1", torch::nn::Linear(width, hidden));
  fc2_ = register_module("fc2", torch::nn::Linear(hidden, width));
  init_linear(fc1_, 1e-6);
  init_linear(fc2_, 1e-6);
}

at::Tensor MlpImpl::forward(const at::Tensor& x) { return fc2_(gelu_tanh(fc1_(x))); }

BlockImpl::BlockImpl(const TowerConfig& c) {
  self_attn_ = register_module("self_attn", SelfAttention(c.width, c.heads));
  layer_norm1_ = register_module("layer_norm1", layer_norm(c.width, c.layer_norm_eps));
  mlp_ = register_module("mlp", Mlp(c.width, c.mlp_width()));
  layer_norm2_ = register_module("layer_norm2", layer_norm(c.width, c.layer_norm_eps));
}

at::Tensor BlockImpl::forward(const at::Tensor& x) {
  const auto y = x + self_attn_(layer_norm1_(x));
  return y + mlp_(layer_norm2_(y));
}

PoolingHeadImpl::PoolingHeadImpl(const TowerConfig& c) : heads_(c.heads) {
  const int64_t w = c.width;
  probe_ = register_parameter("probe", at::empty({1, 1, w}));
  torch::nn::init::xavier_uniform_(probe_);
  auto attention = register_module("attention", std::make_shared<torch::nn::Module>());
  in_proj_weight_ = attention->register_parameter("in_proj_weight", at::empty({3 * w, w}));
  torch::nn::init::xavier_uniform_(in_proj_weight_);
  in_proj_bias_ = attention->register_parameter("in_proj_bias", at::zeros({3 * w}));
  out_proj_ = attention->register_module("out_proj", torch::nn::Linear(w, w));
  init_linear(out_proj_);
  layernorm_ = register_module("layernorm", layer_norm(w, c.layer_norm_eps));
  mlp_ = register_module("mlp", Mlp(w, c.mlp_width()));
}

at::Tensor PoolingHeadImpl::forward(const at::Tensor& x) {
  const int64_t b = x.size(0), w = x.size(2);
  const auto weights = in_proj_weight_.split(w, 0);
  const auto biases = in_proj_bias_.split(w, 0);
  const auto q = at::linear(probe_, weights[0], biases[0]).expand({b, 1, w});
  const auto kv = at::linear(x, in_proj_weight_.narrow(0, w, 2 * w), in_proj_bias_.narrow(0, w, 2 * w)).split(w, -1);
  // The residual stream in the tower's dtype, as in the encoder layers (float32 under bf16 autocast:
  // the LayerNorm then meets its own dtype).
  auto h = out_proj_(attend(split_heads(q, heads_), split_heads(kv[0], heads_), split_heads(kv[1], heads_)))
               .to(x.scalar_type());
  h = h + mlp_(layernorm_(h));
  return h.select(1, 0);
}

SiglipImpl::SiglipImpl(const SiglipConfig& c) : config_(c) {
  const int64_t grid = c.image_size / c.patch, vw = c.vision.width, tw = c.text.width;
  auto vision = register_module("vision_model", std::make_shared<torch::nn::Module>());
  auto embeddings = vision->register_module("embeddings", std::make_shared<torch::nn::Module>());
  patch_embedding_ = embeddings->register_module(
      "patch_embedding", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, vw, c.patch).stride(c.patch)));
  lecun_normal_(patch_embedding_->weight, double(3 * c.patch * c.patch));
  torch::nn::init::zeros_(patch_embedding_->bias);
  vision_position_ = embeddings->register_module("position_embedding", torch::nn::Embedding(grid * grid, vw));
  torch::nn::init::normal_(vision_position_->weight, 0, 1.0 / std::sqrt(double(vw)));
  vision_layers_ = vision->register_module("encoder", std::make_shared<torch::nn::Module>())
                       ->register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.vision.depth; ++i) {
    Block block(c.vision);
    vision_layers_->push_back(block);
    blocks_.add(block.ptr());
  }
  post_layernorm_ = vision->register_module("post_layernorm", layer_norm(vw, c.vision.layer_norm_eps));
  vision_head_ = vision->register_module("head", PoolingHead(c.vision));

  auto text = register_module("text_model", std::make_shared<torch::nn::Module>());
  auto text_embeddings = text->register_module("embeddings", std::make_shared<torch::nn::Module>());
  token_embedding_ = text_embeddings->register_module("token_embedding", torch::nn::Embedding(c.vocab_size, tw));
  torch::nn::init::normal_(token_embedding_->weight, 0, 1.0 / std::sqrt(double(tw)));
  text_position_ = text_embeddings->register_module("position_embedding", torch::nn::Embedding(c.context_length, tw));
  torch::nn::init::normal_(text_position_->weight, 0, 1.0 / std::sqrt(double(tw)));
  text_layers_ = text->register_module("encoder", std::make_shared<torch::nn::Module>())
                     ->register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.text.depth; ++i) {
    Block block(c.text);
    text_layers_->push_back(block);
    blocks_.add(block.ptr());
  }
  final_layer_norm_ = text->register_module("final_layer_norm", layer_norm(tw, c.text.layer_norm_eps));
  text_head_ = text->register_module("head", torch::nn::Linear(tw, c.embed));
  init_linear(text_head_);
  logit_scale_ = register_parameter("logit_scale", at::full({1}, std::log(10.0)));
  logit_bias_ = register_parameter("logit_bias", at::full({1}, -10.0));
}

at::Tensor SiglipImpl::encode_images(const at::Tensor& images) {
  auto x = patch_embedding_(images).flatten(2).transpose(1, 2) + vision_position_->weight;  // [B, P, W]
  for (size_t i = 0; i < vision_layers_->size(); ++i) {
    auto* block = vision_layers_[i]->as<Block>();
    x = blocks_.run(i, x, [block](const at::Tensor& h) { return block->forward(h); });
  }
  x = vision_head_(post_layernorm_(x));
  return torch::nn::functional::normalize(x, torch::nn::functional::NormalizeFuncOptions().dim(-1));
}

at::Tensor SiglipImpl::encode_text(const at::Tensor& tokens) {
  const int64_t t = tokens.size(1);
  TORCH_CHECK(t <= config_.context_length, "encode_text: ", t, " tokens, more than model.context_length ",
              config_.context_length);
  auto x = token_embedding_(tokens) + text_position_->weight.narrow(0, 0, t);
  const size_t first = vision_layers_->size();  // text blocks follow the vision blocks in blocks_
  for (size_t i = 0; i < text_layers_->size(); ++i) {
    auto* block = text_layers_[i]->as<Block>();
    x = blocks_.run(first + i, x, [block](const at::Tensor& h) { return block->forward(h); });
  }
  x = text_head_(final_layer_norm_(x).select(1, t - 1));  // the last position: the eos or padding after it
  return torch::nn::functional::normalize(x, torch::nn::functional::NormalizeFuncOptions().dim(-1));
}

int64_t parameter_count(torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters()) n += p.numel();
  return n;
}

namespace {
// Where this rank's rows start in the gathered batch, and the divisor of a loss summed over them:
// the mean rows per rank (this rank's rows with even counts).
struct GlobalRows {
  int64_t first = 0;
  double per_rank = 1;
};
GlobalRows global_rows(int64_t rows, comm::Communicator* comm, const std::vector<int64_t>& counts) {
  if (!comm) return {0, double(rows)};
  if (counts.empty()) return {int64_t(comm->rank()) * rows, double(rows)};
  GlobalRows g;
  int64_t total = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    if (int(r) < comm->rank()) g.first += counts[r];
    total += counts[r];
  }
  g.per_rank = double(total) / double(counts.size());
  return g;
}
}  // namespace

at::Tensor siglip_loss(const at::Tensor& image_embeddings, const at::Tensor& text_embeddings, const at::Tensor& scale,
                       const at::Tensor& bias, comm::Communicator* comm, const std::vector<int64_t>& counts) {
  const nn::AutocastScope float32(image_embeddings.device().type(), false);  // the loss in float32 under bf16
  const int64_t b = image_embeddings.size(0);
  const at::Tensor texts = comm ? parallel::all_gather_with_grad(*comm, text_embeddings, counts) : text_embeddings;
  const GlobalRows rows = global_rows(b, comm, counts);
  const auto logits = at::matmul(image_embeddings, texts.t()) * scale.exp() + bias;  // [b, N b]
  auto labels = -at::ones_like(logits);
  labels.narrow(1, rows.first, b).fill_diagonal_(1.0);
  return -at::log_sigmoid(labels * logits).sum() / rows.per_rank;
}

at::Tensor clip_loss(const at::Tensor& image_embeddings, const at::Tensor& text_embeddings, const at::Tensor& scale,
                     comm::Communicator* comm, const std::vector<int64_t>& counts) {
  const nn::AutocastScope float32(image_embeddings.device().type(), false);  // the loss in float32 under bf16
  const int64_t b = image_embeddings.size(0);
  const at::Tensor all_texts = comm ? parallel::all_gather_with_grad(*comm, text_embeddings, counts) : text_embeddings;
  const at::Tensor all_images =
      comm ? parallel::all_gather_with_grad(*comm, image_embeddings, counts) : image_embeddings;
  const GlobalRows rows = global_rows(b, comm, counts);
  const auto targets = at::arange(rows.first, rows.first + b, image_embeddings.options().dtype(at::kLong));
  const auto image_to_text = at::matmul(image_embeddings, all_texts.t()) * scale.exp();  // [b, N b]
  const auto text_to_image = at::matmul(text_embeddings, all_images.t()) * scale.exp();
  const auto sum = at::Reduction::Sum;
  return 0.5 *
         (at::cross_entropy_loss(image_to_text, targets, {}, sum) +
          at::cross_entropy_loss(text_to_image, targets, {}, sum)) /
         rows.per_rank;
}

std::vector<HfConfigKey> siglip_config_keys(const nlohmann::json& config, const std::string& origin) {
  if (config.value("model_type", std::string()) != "siglip")
    throw DataError(
        origin, "model_type",
        "is '" + config.value("model_type", std::string()) + "', not 'siglip' (a Hugging Face SiglipModel)");
  std::vector<HfConfigKey> keys;
  const auto section = [&](const char* name) {
    const auto it = config.find(name);
    if (it != config.end() && !it->is_object()) throw DataError(origin, name, "is not an object");
    return it == config.end() ? nlohmann::json::object() : *it;
  };
  const auto vision = section("vision_config"), text = section("text_config");
  // A number from a section, its default when absent.
  const auto number = [&](const nlohmann::json& sec, const char* sec_name, const char* field, double fallback) {
    const auto it = sec.find(field);
    if (it == sec.end()) return fallback;
    if (!it->is_number()) throw DataError(origin, std::string(sec_name) + "." + field, "is not a number");
    return it->get<double>();
  };
  const auto add = [&](const std::string& key, double value, const std::string& field, bool integer = true) {
    keys.push_back({key, integer ? std::to_string(int64_t(value)) : fmt_number(value), field});
  };
  for (const auto& [sec, name] : {std::pair{&vision, "vision_config"}, std::pair{&text, "text_config"}}) {
    const std::string act = sec->value("hidden_act", std::string("gelu_pytorch_tanh"));
    if (act != "gelu_pytorch_tanh")
      throw DataError(origin, std::string(name) + ".hidden_act",
                      "is '" + act + "'; meridian's SigLIP has gelu_pytorch_tanh (GELU, tanh approximation)");
    const std::string tower = sec == &vision ? "model.vision" : "model.text", n = name;
    add(tower + ".width", number(*sec, name, "hidden_size", 768), n + ".hidden_size");
    add(tower + ".depth", number(*sec, name, "num_hidden_layers", 12), n + ".num_hidden_layers");
    add(tower + ".heads", number(*sec, name, "num_attention_heads", 12), n + ".num_attention_heads");
    add(tower + ".intermediate", number(*sec, name, "intermediate_size", 3072), n + ".intermediate_size");
    add(tower + ".layer_norm_eps", number(*sec, name, "layer_norm_eps", 1e-6), n + ".layer_norm_eps", false);
  }
  if (vision.contains("vision_use_head") && !vision.value("vision_use_head", true))
    throw DataError(origin, "vision_config.vision_use_head", "is false; meridian's SigLIP pools with the head");
  if (number(vision, "vision_config", "num_channels", 3) != 3)
    throw DataError(origin, "vision_config.num_channels", "must be 3 (RGB)");
  add("model.image_size", number(vision, "vision_config", "image_size", 224), "vision_config.image_size");
  add("model.patch", number(vision, "vision_config", "patch_size", 16), "vision_config.patch_size");
  add("model.vocab_size", number(text, "text_config", "vocab_size", 32000), "text_config.vocab_size");
  add("model.context_length", number(text, "text_config", "max_position_embeddings", 64),
      "text_config.max_position_embeddings");
  const double width = number(vision, "vision_config", "hidden_size", 768);
  const double projection =
      number(text, "text_config", "projection_size", number(text, "text_config", "hidden_size", 768));
  if (projection != width)
    throw DataError(origin, "text_config.projection_size",
                    "is " + fmt_number(projection) + ", not the vision hidden_size " + fmt_number(width));
  add("model.embed", width, "vision_config.hidden_size");
  return keys;
}

nlohmann::json siglip_hf_config(const SiglipConfig& c, const std::string& torch_dtype) {
  const auto tower = [](const TowerConfig& t) {
    return nlohmann::json{
        {"hidden_size", t.width},         {"intermediate_size", t.mlp_width()}, {"num_hidden_layers", t.depth},
        {"num_attention_heads", t.heads}, {"layer_norm_eps", t.layer_norm_eps}, {"hidden_act", "gelu_pytorch_tanh"},
        {"attention_dropout", 0.0}};
  };
  auto text = tower(c.text), vision = tower(c.vision);
  text["model_type"] = "siglip_text_model";
  text["vocab_size"] = c.vocab_size;
  text["max_position_embeddings"] = c.context_length;
  text["projection_size"] = c.embed;
  text["pad_token_id"] = c.pad_id;
  text["eos_token_id"] = c.eos_id;
  vision["model_type"] = "siglip_vision_model";
  vision["image_size"] = c.image_size;
  vision["patch_size"] = c.patch;
  vision["num_channels"] = 3;
  vision["vision_use_head"] = true;
  return {{"architectures", {"SiglipModel"}}, {"model_type", "siglip"}, {"initializer_factor", 1.0},
          {"torch_dtype", torch_dtype},       {"text_config", text},    {"vision_config", vision}};
}

bool siglip_skipped_tensor(const std::string& name) {
  return name == "vision_model.embeddings.position_ids" || name == "text_model.embeddings.position_ids";
}

}  // namespace meridian::models
