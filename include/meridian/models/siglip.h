// SigLIP-style dual encoder for image-text pairs: a ViT image tower and a Transformer text tower
// projected to a shared, L2-normalised embedding, trained with the pairwise sigmoid loss.
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
#include "meridian/models/blocks.h"

namespace meridian {
class Config;
class ConfigSchema;
}  // namespace meridian

namespace meridian::models {

struct TowerConfig {
  int64_t width = 192, depth = 4, heads = 3;
  double mlp_ratio = 4;
};

struct SiglipConfig {
  int64_t image_size = 128, patch = 16;
  TowerConfig vision;
  int64_t vocab_size = 8000, context_length = 32;
  TowerConfig text;
  int64_t embed = 192;
  int64_t pad_id = 0;

  // From the `model:` section of a YAML config (jobs/configs/siglip-*.yaml); ConfigError names the
  // file and field. Checks that widths divide by heads and the image by the patch.
  static SiglipConfig from_config(const Config& config);
  // Declares the model: keys (types, defaults from this struct, meanings).
  static void declare(ConfigSchema& schema);
  // Multiply-adds x 2 of one image-text pair through both towers (forward only).
  double flops_per_sample() const;
};

// Pre-norm Transformer block (self-attention + MLP, GELU).
class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(int64_t width, int64_t heads, double mlp_ratio);
  // x [B, T, W]; key_padding [B, T] bool (true = ignore) or undefined.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& key_padding = {});

 private:
  int64_t heads_;
  torch::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr}, fc1_{nullptr}, fc2_{nullptr};
};
TORCH_MODULE(Block);

class SiglipImpl : public torch::nn::Module {
 public:
  explicit SiglipImpl(const SiglipConfig& config);
  // images [B, 3, S, S] float (normalised) -> [B, E], unit length.
  at::Tensor encode_images(const at::Tensor& images);
  // tokens [B, L] int64, lengths [B] (eos included) -> [B, E], unit length; pooled at the last token.
  at::Tensor encode_text(const at::Tensor& tokens, const at::Tensor& lengths);
  at::Tensor logit_scale() const { return logit_scale_; }  // log t, initialised to log 10
  at::Tensor logit_bias() const { return logit_bias_; }    // b, initialised to -10
  const SiglipConfig& config() const { return config_; }
  // The vision blocks then the text blocks (activation checkpointing, ZeRO-3).
  BlockRunner& blocks() { return blocks_; }

 private:
  SiglipConfig config_;
  BlockRunner blocks_;
  torch::nn::Conv2d patch_embed_{nullptr};
  at::Tensor vision_pos_, text_pos_, logit_scale_, logit_bias_;
  torch::nn::ModuleList vision_blocks_{nullptr}, text_blocks_{nullptr};
  torch::nn::LayerNorm vision_ln_{nullptr}, text_ln_{nullptr};
  torch::nn::Embedding token_embed_{nullptr};
  torch::nn::Linear vision_proj_{nullptr}, text_proj_{nullptr};
};
TORCH_MODULE(Siglip);

int64_t parameter_count(torch::nn::Module& module);

// The sigmoid loss of SigLIP over the global batch, computed where the images are: this rank's b
// image embeddings against every rank's text embeddings (gathered with all_gather_with_grad, in
// rank order), pairs (i, j) labelled +1 when j is image i's own text (global row rank * b + i), -1
// otherwise: loss = -(1 / b) sum_{i, j} log sigmoid(z_ij (exp(scale) x_i . y_j + bias)).
// The mean of this over ranks is the single-process loss on the whole batch (-(1/Nb) sum over all
// N b x N b pairs), so gradients averaged by DistributedDataParallel are exactly that loss's.
// Collective (the gather). comm == nullptr: one process, texts = the local ones.
at::Tensor siglip_loss(const at::Tensor& image_embeddings, const at::Tensor& text_embeddings, const at::Tensor& scale,
                       const at::Tensor& bias, comm::Communicator* comm);

// CLIP's softmax loss over the global batch, the other option: the mean of the image->text and
// text->image cross-entropies with logits exp(scale) x_i . y_j, each rank's b rows against every
// rank's columns (both sides gathered with all_gather_with_grad), the right column of row i being
// global index rank * b + i. Rows are averaged locally, so the mean over ranks is the
// single-process loss on the whole batch. Collective (two gathers); comm == nullptr: one process.
at::Tensor clip_loss(const at::Tensor& image_embeddings, const at::Tensor& text_embeddings, const at::Tensor& scale,
                     comm::Communicator* comm);

}  // namespace meridian::models
