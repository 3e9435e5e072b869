// Ultralytics' modules (ultralytics/nn/modules) with their semantics and attribute names, so that
// their state_dict names are Ultralytics' (model.0.conv.weight, model.2.m.0.cv1.bn.running_mean, ...).
// Private to src/models: YoloImpl (yolo.cpp) builds them from a model YAML's rows.
//
// Every Conv is Conv2d without bias + BatchNorm2d (eps 1e-3, momentum 0.03) + SiLU or nothing; with a
// `sync` communicator (not owned, outlives the module) its BatchNorm2d is a parallel::SyncBatchNorm2d
// under the same name, so forward in training mode and backward are collective over it. Channels c1
// (input) and c2 (output) are taken as given: the builder applies the scale's width.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "meridian/parallel/sync_bn.h"

namespace meridian::comm {
class Communicator;
}

namespace meridian::models::ultralytics {

using Fn = std::function<at::Tensor(const at::Tensor&)>;

// Children "0", "1", ... run one after another (nn.Sequential) or one at a time (nn.ModuleList).
class ChainImpl : public torch::nn::Module {
 public:
  template <class M>
  M add(M m) {
    auto held = register_module(std::to_string(fns_.size()), m);
    fns_.push_back([held](const at::Tensor& x) { return held->forward(x); });
    return held;
  }
  at::Tensor forward(at::Tensor x) {
    for (const auto& f : fns_) x = f(x);
    return x;
  }
  at::Tensor run(size_t i, const at::Tensor& x) const { return fns_.at(i)(x); }
  size_t size() const { return fns_.size(); }

 private:
  std::vector<Fn> fns_;
};
TORCH_MODULE(Chain);

// Conv2d(k, s, autopad, groups, dilation, no bias) + BatchNorm2d(eps 1e-3, momentum 0.03: Ultralytics'
// initialize_weights) + SiLU or nothing. p < 0: autopad (half the dilated kernel).
class ConvImpl : public torch::nn::Module {
 public:
  ConvImpl(int64_t c1, int64_t c2, int64_t k, int64_t s, int64_t p, int64_t g, int64_t d, bool act,
           comm::Communicator* sync);
  at::Tensor forward(const at::Tensor& x);  // [B, c1, H, W] -> [B, c2, H/s, W/s]

 private:
  torch::nn::Conv2d conv_{nullptr};
  torch::nn::BatchNorm2d bn_{nullptr};
  parallel::SyncBatchNorm2d sync_bn_{nullptr};
  bool act_;
};
TORCH_MODULE(Conv);

// Ultralytics' Conv(c1, c2, k, s, p=None, g=1, act) for the blocks.
Conv conv(int64_t c1, int64_t c2, int64_t k, comm::Communicator* sync, int64_t s = 1, int64_t g = 1, bool act = true,
          int64_t p = -1);

class BottleneckImpl : public torch::nn::Module {
 public:
  BottleneckImpl(int64_t c1, int64_t c2, bool shortcut, int64_t g, int64_t k0, int64_t k1, double e,
                 comm::Communicator* sync);
  at::Tensor forward(const at::Tensor& x);

 private:
  Conv cv1_{nullptr}, cv2_{nullptr};
  bool add_;
};
TORCH_MODULE(Bottleneck);

// C3 with n Bottlenecks of k x k (C3k): cv3(cat(m(cv1(x)), cv2(x))).
class C3kImpl : public torch::nn::Module {
 public:
  C3kImpl(int64_t c1, int64_t c2, int64_t n, bool shortcut, int64_t g, double e, int64_t k, comm::Communicator* sync);
  at::Tensor forward(const at::Tensor& x);

 private:
  Conv cv1_{nullptr}, cv2_{nullptr}, cv3_{nullptr};
  Chain m_{nullptr};
};
TORCH_MODULE(C3k);

// C2f: cv1 to 2c (c = int(c2 * e)), halves, n blocks chained on the second, cv2 over all 2 + n.
// The blocks: C2f's Bottleneck(c, c, e=1.0); C3k2's Bottleneck(c, c, e=0.5) or C3k(c, c, 2).
enum class C2fBlock { kBottleneck, kHalfBottleneck, kC3k };
class C2fImpl : public torch::nn::Module {
 public:
  C2fImpl(int64_t c1, int64_t c2, int64_t n, bool shortcut, int64_t g, double e, C2fBlock block,
          comm::Communicator* sync);
  at::Tensor forward(const at::Tensor& x);

 private:
  int64_t c_;
  Conv cv1_{nullptr}, cv2_{nullptr};
  Chain m_{nullptr};
};
TORCH_MODULE(C2f);

// C3k2: C2f with C3k2's blocks (a class of its own for the model summary's type column).
class C3k2Impl : public C2fImpl {
 public:
  using C2fImpl::C2fImpl;
};
TORCH_MODULE(C3k2);

// Spatial pyramid pooling, fast: cv1 to c1 / 2, three k x k max pools chained, cv2 over all four.
class SPPFImpl : public torch::nn::Module {
 public:
  SPPFImpl(int64_t c1, int64_t c2, int64_t k, comm::Communicator* sync);
  at::Tensor forward(const at::Tensor& x);

 private:
  int64_t k_;
  Conv cv1_{nullptr}, cv2_{nullptr};
};
TORCH_MODULE(SPPF);

// C2PSA's Attention: qkv channels per head [q (key_dim) | k (key_dim) | v (head_dim)].
class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(int64_t dim, int64_t heads, double attn_ratio, comm::Communicator* sync);
  at::Tensor forward(const at::Tensor& x);
  double matmul_flops(double n) const {  // q^T k and v attn^T over n tokens
    return 2.0 * n * n * double(heads_) * double(key_dim_ + head_dim_);
  }

 private:
  int64_t heads_, head_dim_, key_dim_;
  Conv qkv_{nullptr}, proj_{nullptr}, pe_{nullptr};
};
TORCH_MODULE(Attention);

// x + attn(x), then + a 1x1 MLP (dim -> hidden with SiLU, hidden -> dim without): C2PSA's PSABlock
// (children attn, ffn) and A2C2f's ABlock (attn, mlp).
class AttnBlockImpl : public torch::nn::Module {
 public:
  template <class Attn>
  AttnBlockImpl(Attn attn, int64_t dim, int64_t hidden, const std::string& mlp_name, comm::Communicator* sync) {
    auto held = register_module("attn", attn);
    attn_ = [held](const at::Tensor& x) { return held->forward(x); };
    mlp_ = register_module(mlp_name, Chain());
    mlp_->add(conv(dim, hidden, 1, sync));
    mlp_->add(conv(hidden, dim, 1, sync, 1, 1, false));
  }
  at::Tensor forward(const at::Tensor& x);

 private:
  Fn attn_;
  Chain mlp_{nullptr};
};
TORCH_MODULE(AttnBlock);

// cv1 to 2c (c = int(c1 * e)), n PSABlocks (heads = c / 64) on the second half, cv2 back to c1.
class C2PSAImpl : public torch::nn::Module {
 public:
  C2PSAImpl(int64_t c1, int64_t n, double e, comm::Communicator* sync);
  at::Tensor forward(const at::Tensor& x);

 private:
  int64_t c_;
  Conv cv1_{nullptr}, cv2_{nullptr};
  Chain m_{nullptr};
};
TORCH_MODULE(C2PSA);

// YOLO12's area attention: qkv channels per head [q | k | v] (head_dim each); the (H*W) tokens are
// cut into `area` consecutive runs (horizontal strips when area divides H); then x + pe(v), proj.
// forward throws std::invalid_argument when `area` does not divide H*W.
class AAttnImpl : public torch::nn::Module {
 public:
  AAttnImpl(int64_t dim, int64_t heads, int64_t area, comm::Communicator* sync);
  at::Tensor forward(const at::Tensor& x);
  double matmul_flops(double n) const {  // q^T k and v attn^T within each area
    return 2.0 * 2.0 * n * (n / double(std::max<int64_t>(area_, 1))) * double(heads_ * head_dim_);
  }

 private:
  int64_t heads_, head_dim_, area_;
  Conv qkv_{nullptr}, proj_{nullptr}, pe_{nullptr};
};
TORCH_MODULE(AAttn);

// YOLO12's A2C2f: cv1 to c (c = int(c2 * e)), n blocks chained (a2: pairs of ABlocks with c / 32
// heads; else C3k), cv2 over all 1 + n; residual (a2 only): x + gamma * out.
class A2C2fImpl : public torch::nn::Module {
 public:
  A2C2fImpl(int64_t c1, int64_t c2, int64_t n, bool a2, int64_t area, bool residual, double mlp_ratio, double e,
            int64_t g, bool shortcut, comm::Communicator* sync);
  at::Tensor forward(const at::Tensor& x);

 private:
  Conv cv1_{nullptr}, cv2_{nullptr};
  at::Tensor gamma_;
  Chain m_{nullptr};
};
TORCH_MODULE(A2C2f);

// nn.Upsample(scale_factor=factor, mode="nearest").
class UpsampleImpl : public torch::nn::Module {
 public:
  explicit UpsampleImpl(int64_t factor) : factor_(factor) {}
  at::Tensor forward(const at::Tensor& x);

 private:
  int64_t factor_;
};
TORCH_MODULE(Upsample);

class ConcatImpl : public torch::nn::Module {};  // cat along channels (run by YoloImpl::forward)
TORCH_MODULE(Concat);

// The DFL's fixed 1x1 convolution 0..reg_max-1 (parameter "conv.weight", not trained).
class DFLImpl : public torch::nn::Module {
 public:
  explicit DFLImpl(int64_t bins);
};
TORCH_MODULE(DFL);

// Detect: per level i (input channels ch[i], stride strides[i]) cv2 (box: Conv 3x3, Conv 3x3, Conv2d
// 1x1 -> 4 * reg_max DFL logits) and cv3 (class logits: `legacy` YOLOv8's Conv 3x3 pair, else the
// depthwise DWConv + 1x1 pairs), biases as Ultralytics' bias_init; and dfl, kept for the names.
class DetectImpl : public torch::nn::Module {
 public:
  DetectImpl(int64_t nc, int64_t reg_max, const std::vector<int64_t>& ch, const std::vector<int64_t>& strides,
             bool legacy, comm::Communicator* sync);
  // One map per level: [B, ch[i], H_i, W_i] -> [B, 4 * reg_max + nc, H_i, W_i], cat(cv2, cv3).
  std::vector<at::Tensor> forward(const std::vector<at::Tensor>& xs);
  // Level i's box (cls false) or class branch, for counting its FLOPs.
  torch::nn::Module& branch(size_t i, bool cls) { return *(cls ? cv3_ : cv2_)[i]; }

 private:
  torch::nn::ModuleList cv2_{nullptr}, cv3_{nullptr};
};
TORCH_MODULE(Detect);

}  // namespace meridian::models::ultralytics
