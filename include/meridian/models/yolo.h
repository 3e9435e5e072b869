// YOLO-style anchor-free detector (issue 8): a YOLOv12-like backbone (strided convolutions,
// C2f residual layer-aggregation blocks, area-attention A2C2f stages at P4 and P5), an FPN/PAN neck
// and the YOLOv8 decoupled head (per level a box branch of 4 * reg_max DFL logits and a class
// branch of num_classes logits). The loss, the assigner and decoding live in meridian/detect/loss.h.
//
// Every convolution except the head's last ones is ConvBN: Conv2d (no bias) + BatchNorm2d (eps 1e-3,
// momentum 0.03) + SiLU (or no activation). With model.sync_bn and a communicator given to Yolo, every
// BatchNorm2d is a parallel::SyncBatchNorm2d instead (statistics over all ranks' batches; same
// parameter and buffer names, so checkpoints load either way). Channels of a layer with base width c (YOLOv8/v12 yaml
// numbers, 64 ... 1024) are make_divisible(min(c, max_channels) * width, 8); a block with base
// repeats n has max(round(n * depth), 1).
//
//   stem    ConvBN 3x3 s2           3 -> 64              stride 2
//   down1   ConvBN 3x3 s2          64 -> 128             stride 4
//   stage1  C2f (e 0.25, n 2)     128 -> 256
//   down2   ConvBN 3x3 s2         256 -> 256             stride 8
//   stage2  C2f (e 0.25, n 2)     256 -> 512             = P3
//   down3   ConvBN 3x3 s2         512 -> 512             stride 16
//   stage3  A2C2f (areas, n 4)    512 -> 512             = P4   (C2f n 4 when !area_attention)
//   down4   ConvBN 3x3 s2         512 -> 1024            stride 32
//   stage4  A2C2f (1 area, n 4)  1024 -> 1024            = P5   (C2f n 4 when !area_attention)
//   top_down4  C2f(up(P5) ++ P4 -> 512, n 2)             stride 16
//   top_down3  C2f(up(td4) ++ P3 -> 256, n 2)            stride 8  -> out 0
//   down_n3 ConvBN 3x3 s2, bottom_up4 C2f(.. ++ td4 -> 512)   stride 16 -> out 1
//   down_n4 ConvBN 3x3 s2, bottom_up5 C2f(.. ++ P5 -> 1024)   stride 32 -> out 2
//   box.<l>  ConvBN 3x3 -> ConvBN 3x3 -> Conv2d 1x1 (bias) -> 4 * reg_max
//   cls.<l>  ConvBN dw3x3 -> ConvBN 1x1 -> ConvBN dw3x3 -> ConvBN 1x1 -> Conv2d 1x1 (bias) -> num_classes
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>

#include <cstdint>
#include <vector>

#include "meridian/parallel/sync_bn.h"

namespace meridian {
class Config;
class ConfigSchema;
}  // namespace meridian

namespace meridian::models {

struct YoloConfig {
  int64_t num_classes = 80;
  double width = 0.25;          // channel multiplier
  double depth = 0.5;           // repeat multiplier
  int64_t max_channels = 1024;  // cap on a layer's base channels, applied before `width`
  int64_t reg_max = 16;         // DFL bins per box side (distances 0 .. reg_max - 1 strides)
  bool area_attention = true;   // A2C2f stages at P4 and P5 (C2f when false)
  int64_t areas = 4;            // horizontal strips of the P4 attention (P5 always uses 1)
  double mlp_ratio = 2.0;       // A2C2f MLP hidden width / its channels
  bool sync_bn = false;         // SyncBatchNorm2d in every ConvBN (needs a communicator: YoloImpl)

  // From the `model:` section. model.scale: n|s|m|l|x sets depth/width/max_channels as YOLOv12
  // (n 0.50/0.25/1024, s 0.50/0.50/1024, m 0.50/1.00/512, l 1.00/1.00/512, x 1.00/1.50/512);
  // model.width, model.depth, model.max_channels override the preset; also model.num_classes,
  // model.reg_max, model.area_attention, model.areas, model.mlp_ratio, model.sync_bn. ConfigError names the file
  // and the field (unknown scale, non-positive multipliers, num_classes < 1, reg_max < 2, ...).
  static YoloConfig from_config(const Config& config);
  // Declares the model: keys (types, defaults from this struct, meanings).
  static void declare(ConfigSchema& schema);
  int64_t channels(int64_t base) const;  // make_divisible(min(base, max_channels) * width, 8), >= 8
  int64_t repeats(int64_t base) const;   // max(round(base * depth), 1)
  int64_t outputs() const { return 4 * reg_max + num_classes; }  // channels of each output level
  // Closed form, without building the model: equals the sum of Yolo(*this)'s parameter numels
  // (BatchNorm running statistics are buffers, not parameters).
  int64_t parameter_count() const;
  // Forward FLOPs (2 x multiply-adds) of one image_size x image_size image, closed form: every
  // convolution 2 * k*k * (cin/groups) * cout * Hout * Wout, plus the attention matmuls
  // (q k^T and attn v: 2 * 2 * N * (N / areas) * C per area-attention unit). BatchNorm,
  // activations, softmax, upsampling and additions are not counted (ultralytics' thop figure
  // counts the convolutions the same way but not the attention matmuls).
  // std::invalid_argument unless image_size is a positive multiple of 32.
  double flops(int64_t image_size) const;
};

// Output strides of the three levels: {8, 16, 32}.
const std::vector<int64_t>& yolo_strides();

// Conv2d(k, stride, padding k/2, groups, no bias) + BatchNorm2d(eps 1e-3, momentum 0.03) + SiLU
// (identity when act is false). Submodules "conv", "bn". With `sync` (not owned, outlives the
// module) "bn" is a parallel::SyncBatchNorm2d on it (same options and names; its forward in training
// and its backward are then collective, see sync_bn.h). Every block below takes `sync` the same way
// and hands it to its ConvBNs.
class ConvBNImpl : public torch::nn::Module {
 public:
  ConvBNImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1, int64_t groups = 1, bool act = true,
             comm::Communicator* sync = nullptr);
  at::Tensor forward(const at::Tensor& x);  // [B, in, H, W] -> [B, out, ceil(H/stride), ceil(W/stride)]
  bool synchronised() const { return !sync_bn_.is_empty(); }

 private:
  torch::nn::Conv2d conv_{nullptr};
  torch::nn::BatchNorm2d bn_{nullptr};  // one of the two is set
  parallel::SyncBatchNorm2d sync_bn_{nullptr};
  bool act_;
};
TORCH_MODULE(ConvBN);

// Two 3x3 ConvBNs at c channels, plus the input when `shortcut`.
class BottleneckImpl : public torch::nn::Module {
 public:
  BottleneckImpl(int64_t c, bool shortcut, comm::Communicator* sync = nullptr);
  at::Tensor forward(const at::Tensor& x);

 private:
  ConvBN cv1_{nullptr}, cv2_{nullptr};
  bool shortcut_;
};
TORCH_MODULE(Bottleneck);

// C2f (YOLOv8; C3k2-like): cv1 1x1 to 2c (c = int(out * e)), split in two halves, n Bottlenecks
// chained on the second half, all 2 + n pieces concatenated, cv2 1x1 to `out`.
class C2fImpl : public torch::nn::Module {
 public:
  C2fImpl(int64_t in, int64_t out, int64_t n, bool shortcut, double e, comm::Communicator* sync = nullptr);
  at::Tensor forward(const at::Tensor& x);  // [B, in, H, W] -> [B, out, H, W]

 private:
  int64_t hidden_;
  ConvBN cv1_{nullptr}, cv2_{nullptr};
  torch::nn::ModuleList m_{nullptr};
};
TORCH_MODULE(C2f);

// YOLOv12 area attention over a [B, C, H, W] map: qkv = ConvBN 1x1 (C -> 3C, no activation;
// channels [q | k | v], head h uses channels h*d .. h*d + d - 1 of each, d = C / heads); the map
// is cut into `areas` horizontal strips of H / areas rows ([B, C, H, W] -> [B*areas, (H/areas)*W, C]
// tokens; one area when H is not divisible by areas) and multi-head softmax(q k^T / sqrt(d)) v
// is computed within each strip only; then out = proj(attn + pe(v)), pe = depthwise 7x7 ConvBN on
// v, proj = ConvBN 1x1 (no activation). std::invalid_argument when heads does not divide dim.
class AreaAttentionImpl : public torch::nn::Module {
 public:
  AreaAttentionImpl(int64_t dim, int64_t heads, int64_t areas, comm::Communicator* sync = nullptr);
  at::Tensor forward(const at::Tensor& x);  // [B, dim, H, W] -> [B, dim, H, W]
  int64_t heads() const { return heads_; }
  int64_t areas() const { return areas_; }
  // The areas actually used for a map of `height` rows (areas, or 1 when it does not divide height).
  int64_t areas_for(int64_t height) const { return (areas_ > 1 && height % areas_ == 0) ? areas_ : 1; }
  ConvBN& qkv() { return qkv_; }
  ConvBN& proj() { return proj_; }
  ConvBN& pe() { return pe_; }

 private:
  int64_t dim_, heads_, areas_;
  ConvBN qkv_{nullptr}, proj_{nullptr}, pe_{nullptr};
};
TORCH_MODULE(AreaAttention);

// x + attn(x), then + mlp (ConvBN 1x1 dim -> hidden with SiLU, ConvBN 1x1 hidden -> dim without).
class ABlockImpl : public torch::nn::Module {
 public:
  ABlockImpl(int64_t dim, int64_t heads, int64_t hidden, int64_t areas, comm::Communicator* sync = nullptr);
  at::Tensor forward(const at::Tensor& x);

 private:
  AreaAttention attn_{nullptr};
  ConvBN mlp1_{nullptr}, mlp2_{nullptr};
};
TORCH_MODULE(ABlock);

// A2C2f (YOLOv12, residual variant): cv1 1x1 to c = out / 2, n units of two ABlocks chained, the
// 1 + n pieces concatenated, cv2 1x1 to `out`; returns x + gamma * that (gamma [out], initialised
// to 0.01) when in == out, else just that. Heads: c / 32 when 32 divides c, else 1.
class A2C2fImpl : public torch::nn::Module {
 public:
  A2C2fImpl(int64_t in, int64_t out, int64_t n, int64_t areas, double mlp_ratio, comm::Communicator* sync = nullptr);
  at::Tensor forward(const at::Tensor& x);  // [B, in, H, W] -> [B, out, H, W]
  static int64_t heads_for(int64_t c) { return c % 32 == 0 ? c / 32 : 1; }

 private:
  ConvBN cv1_{nullptr}, cv2_{nullptr};
  torch::nn::ModuleList m_{nullptr};
  at::Tensor gamma_;  // undefined when in != out
};
TORCH_MODULE(A2C2f);

class YoloImpl : public torch::nn::Module {
 public:
  // std::invalid_argument for a config that from_config would reject. `sync_comm` (not owned; must
  // outlive the model) is used only when config.sync_bn: then every ConvBN normalises with a
  // parallel::SyncBatchNorm2d on it, so forward in training mode and backward are collective over it
  // (every rank runs them in step). Give it a communicator of its own (comm::make_communicator,
  // collective), not the one DDP reduces gradients on (sync_bn.h says why). Without it, or with
  // sync_bn off, plain BatchNorm2d. Parameter and buffer names are the same in both cases.
  explicit YoloImpl(const YoloConfig& config, comm::Communicator* sync_comm = nullptr);
  // images float [B, 3, H, W] in 0..1, H and W multiples of 32 (std::invalid_argument otherwise,
  // naming the size) -> 3 levels [B, 4*reg_max + num_classes, H/s, W/s] for s = 8, 16, 32:
  // channels 0 .. 4*reg_max-1 are DFL logits (side-major: l, t, r, b, reg_max bins each), the rest
  // class logits (before sigmoid).
  std::vector<at::Tensor> forward(const at::Tensor& images);
  double flops(int64_t image_size) const { return config_.flops(image_size); }
  const YoloConfig& config() const { return config_; }
  bool synchronised_bn() const { return sync_ != nullptr; }  // SyncBatchNorm2d in use

 private:
  YoloConfig config_;
  comm::Communicator* sync_ = nullptr;  // config.sync_bn ? sync_comm : nullptr
  ConvBN stem_{nullptr}, down1_{nullptr}, down2_{nullptr}, down3_{nullptr}, down4_{nullptr};
  C2f stage1_{nullptr}, stage2_{nullptr};
  A2C2f attn3_{nullptr}, attn4_{nullptr};  // stage3/stage4 when area_attention
  C2f plain3_{nullptr}, plain4_{nullptr};  // stage3/stage4 otherwise
  C2f top_down4_{nullptr}, top_down3_{nullptr}, bottom_up4_{nullptr}, bottom_up5_{nullptr};
  ConvBN down_n3_{nullptr}, down_n4_{nullptr};
  torch::nn::ModuleList box_{nullptr}, cls_{nullptr};  // one Sequential per level
};
TORCH_MODULE(Yolo);

}  // namespace meridian::models
