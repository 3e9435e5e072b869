// SigLIP, the dual encoder of image-text pairs as Hugging Face transformers defines it (SiglipModel):
// a ViT image tower pooled by attention, a Transformer text tower pooled at its last position, both
// L2-normalised into a shared embedding, trained with the pairwise sigmoid loss.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cstdint>
#include <string>

#include "meridian/comm/communicator.h"
#include "meridian/models/hf_checkpoint.h"
#include "meridian/nn/blocks.h"

namespace meridian {
class Config;
class ConfigSchema;
}  // namespace meridian

namespace meridian::models {

// One tower's Transformer encoder (Hugging Face SiglipTextConfig / SiglipVisionConfig fields).
struct TowerConfig {
  int64_t width = 192, depth = 4, heads = 3;  // hidden_size, num_hidden_layers, num_attention_heads
  double mlp_ratio = 4;
  int64_t intermediate = 0;      // intermediate_size; 0: width * mlp_ratio
  double layer_norm_eps = 1e-6;  // layer_norm_eps
  int64_t mlp_width() const;
};

struct SiglipConfig {
  int64_t image_size = 128, patch = 16;  // vision image_size, patch_size
  TowerConfig vision;
  int64_t vocab_size = 8000, context_length = 32;  // text vocab_size, max_position_embeddings
  TowerConfig text;
  int64_t embed = 192;  // the shared embedding: the vision width (its pooling head's output); the text head's output
  int64_t pad_id = 0;   // the tokenizer's (dataset's) pad and eos pieces; config.json's pad/eos_token_id
  int64_t eos_id = 0;

  // From the `model:` section of a YAML config (jobs/configs/siglip-*.yaml); ConfigError names the
  // file and field. Checks that widths divide by heads, the image by the patch, and embed = vision width.
  static SiglipConfig from_config(const Config& config);
  // Declares the model: keys (types, defaults from this struct, meanings).
  static void declare(ConfigSchema& schema);
  // Multiply-adds x 2 of one image-text pair through both towers (forward only).
  double flops_per_sample() const;
  // Parameters of SiglipImpl for this config, in closed form (docs/performance.md lists the presets
  // against a PyTorch build of each published shape).
  int64_t parameter_count() const;
};

// The attention of an encoder layer: q_proj, k_proj, v_proj, out_proj (with biases); nn::attention.
class SelfAttentionImpl : public torch::nn::Module {
 public:
  SelfAttentionImpl(int64_t width, int64_t heads);
  at::Tensor forward(const at::Tensor& x);  // [B, T, W] -> [B, T, W]

 private:
  int64_t heads_;
  torch::nn::Linear q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr}, out_proj_{nullptr};
};
TORCH_MODULE(SelfAttention);

// fc1, GELU (tanh approximation: gelu_pytorch_tanh), fc2.
class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(int64_t width, int64_t hidden);
  at::Tensor forward(const at::Tensor& x);

 private:
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};
TORCH_MODULE(Mlp);

// SiglipEncoderLayer: x + self_attn(layer_norm1(x)), then + mlp(layer_norm2(.)).
class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const TowerConfig& c);
  at::Tensor forward(const at::Tensor& x);  // [B, T, W]

 private:
  torch::nn::LayerNorm layer_norm1_{nullptr}, layer_norm2_{nullptr};
  SelfAttention self_attn_{nullptr};
  Mlp mlp_{nullptr};
};
TORCH_MODULE(Block);

// SiglipMultiheadAttentionPoolingHead: a learned probe attends over the patches (torch's
// MultiheadAttention: in_proj_weight/bias, out_proj), then h + mlp(layernorm(h)); one vector per image.
class PoolingHeadImpl : public torch::nn::Module {
 public:
  explicit PoolingHeadImpl(const TowerConfig& c);
  at::Tensor forward(const at::Tensor& x);  // [B, T, W] -> [B, W]

 private:
  int64_t heads_;
  at::Tensor probe_, in_proj_weight_, in_proj_bias_;
  torch::nn::Linear out_proj_{nullptr};
  torch::nn::LayerNorm layernorm_{nullptr};
  Mlp mlp_{nullptr};
};
TORCH_MODULE(PoolingHead);

// Hugging Face's SiglipModel (transformers models/siglip/modeling_siglip.py), with its parameter
// names (docs/formats.md): vision_model.{embeddings, encoder.layers.N, post_layernorm, head},
// text_model.{embeddings, encoder.layers.N, final_layer_norm, head}, logit_scale, logit_bias.
class SiglipImpl : public torch::nn::Module {
 public:
  explicit SiglipImpl(const SiglipConfig& config);
  // images [B, 3, S, S] float (normalised) -> [B, E], unit length.
  at::Tensor encode_images(const at::Tensor& images);
  // tokens [B, T] int64, T <= context_length, padded with the pad id (as SigLIP was trained: padding to
  // the context length, no attention mask) -> [B, E], unit length; pooled at the last position.
  at::Tensor encode_text(const at::Tensor& tokens);
  at::Tensor logit_scale() const { return logit_scale_; }  // log t, initialised to log 10
  at::Tensor logit_bias() const { return logit_bias_; }    // b, initialised to -10
  const SiglipConfig& config() const { return config_; }
  // The vision blocks then the text blocks (activation checkpointing, ZeRO-3).
  nn::BlockRunner& blocks() { return blocks_; }

 private:
  SiglipConfig config_;
  nn::BlockRunner blocks_;
  torch::nn::Conv2d patch_embedding_{nullptr};
  torch::nn::Embedding vision_position_{nullptr}, token_embedding_{nullptr}, text_position_{nullptr};
  torch::nn::ModuleList vision_layers_{nullptr}, text_layers_{nullptr};
  torch::nn::LayerNorm post_layernorm_{nullptr}, final_layer_norm_{nullptr};
  PoolingHead vision_head_{nullptr};
  torch::nn::Linear text_head_{nullptr};
  at::Tensor logit_scale_, logit_bias_;
};
TORCH_MODULE(Siglip);

int64_t parameter_count(torch::nn::Module& module);

// The model: keys a Hugging Face SiglipModel config.json (model_type "siglip") sets, with
// transformers' defaults for absent fields (configuration_siglip.py: text 32000 tokens, 768 wide,
// 12 layers of 12 heads, MLP 3072, 64 positions, eps 1e-6; vision 224 px, patch 16, same tower).
// DataError naming `origin` and the field for another model_type, an activation other than
// gelu_pytorch_tanh, vision_use_head false, num_channels other than 3, or projection_size other
// than the vision width.
std::vector<HfConfigKey> siglip_config_keys(const nlohmann::json& config, const std::string& origin);
// The config.json transformers reads as a SiglipModel of these shapes; torch_dtype "float32" or "bfloat16".
nlohmann::json siglip_hf_config(const SiglipConfig& config, const std::string& torch_dtype);
// Tensors of a Hugging Face SiglipModel that are not parameters here (position_ids buffers): load_into
// skips them.
bool siglip_skipped_tensor(const std::string& name);

// The sigmoid loss of SigLIP over the global batch, computed where the images are: this rank's b
// image embeddings against every rank's text embeddings (gathered with all_gather_with_grad, in
// rank order), pairs (i, j) labelled +1 when j is image i's own text (global row rank * b + i), -1
// otherwise: loss = -(1 / b) sum_{i, j} log sigmoid(z_ij (exp(scale) x_i . y_j + bias)).
// The mean of this over ranks is the single-process loss on the whole batch (-(1/Nb) sum over all
// N b x N b pairs), so gradients averaged by DistributedDataParallel are exactly that loss's.
// Collective (the gather). comm == nullptr: one process, texts = the local ones.
// Uneven shares (train.balance): `counts` gives every rank's rows (the same vector on every rank;
// empty: all equal). Row i of this rank is then global row (sum of the counts before it) + i and
// the sum is divided by the mean count instead of b, so the mean over ranks is still the whole
// batch's loss.
at::Tensor siglip_loss(const at::Tensor& image_embeddings, const at::Tensor& text_embeddings, const at::Tensor& scale,
                       const at::Tensor& bias, comm::Communicator* comm, const std::vector<int64_t>& counts = {});

// CLIP's softmax loss over the global batch, the other option: the mean of the image->text and
// text->image cross-entropies with logits exp(scale) x_i . y_j, each rank's b rows against every
// rank's columns (both sides gathered with all_gather_with_grad), the right column of row i being
// global index rank * b + i. Rows are averaged locally, so the mean over ranks is the
// single-process loss on the whole batch. Collective (two gathers); comm == nullptr: one process.
// `counts` as siglip_loss: rows summed and divided by the mean count.
at::Tensor clip_loss(const at::Tensor& image_embeddings, const at::Tensor& text_embeddings, const at::Tensor& scale,
                     comm::Communicator* comm, const std::vector<int64_t>& counts = {});

}  // namespace meridian::models
