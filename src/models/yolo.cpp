#include "meridian/models/yolo.h"

#include <ATen/ATen.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "meridian/core/config_binding.h"
#include "meridian/core/config_schema.h"
#include "meridian/core/error.h"
#include "meridian/models/safetensors.h"
#include "meridian/parallel/sync_bn.h"
#include "meridian/yolo_yamls.h"  // kYoloYamls: jobs/configs/ultralytics/*.yaml, generated at configure time

namespace meridian::models {

// ---- The modules, Ultralytics' semantics and attribute names (ultralytics/nn/modules).
namespace ultralytics {

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
// initialize_weights) + SiLU or nothing.
class ConvImpl : public torch::nn::Module {
 public:
  ConvImpl(int64_t c1, int64_t c2, int64_t k, int64_t s, int64_t p, int64_t g, int64_t d, bool act,
           comm::Communicator* sync)
      : act_(act) {
    const int64_t span = d > 1 ? d * (k - 1) + 1 : k;
    conv_ = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(c1, c2, k)
                                                          .stride(s)
                                                          .padding(p < 0 ? span / 2 : p)
                                                          .groups(g)
                                                          .dilation(d)
                                                          .bias(false)));
    const auto bn = torch::nn::BatchNorm2dOptions(c2).eps(1e-3).momentum(0.03);
    if (sync)
      sync_bn_ = register_module("bn", parallel::SyncBatchNorm2d(bn, sync));
    else
      bn_ = register_module("bn", torch::nn::BatchNorm2d(bn));
  }
  at::Tensor forward(const at::Tensor& x) {
    auto y = sync_bn_ ? sync_bn_(conv_(x)) : bn_(conv_(x));
    return act_ ? at::silu(y) : y;
  }

 private:
  torch::nn::Conv2d conv_{nullptr};
  torch::nn::BatchNorm2d bn_{nullptr};
  parallel::SyncBatchNorm2d sync_bn_{nullptr};
  bool act_;
};
TORCH_MODULE(Conv);

// Ultralytics' Conv(c1, c2, k, s, p=None, g=1, act) for the blocks below.
Conv conv(int64_t c1, int64_t c2, int64_t k, comm::Communicator* sync, int64_t s = 1, int64_t g = 1, bool act = true,
          int64_t p = -1) {
  return Conv(c1, c2, k, s, p, g, 1, act, sync);
}

class BottleneckImpl : public torch::nn::Module {
 public:
  BottleneckImpl(int64_t c1, int64_t c2, bool shortcut, int64_t g, int64_t k0, int64_t k1, double e,
                 comm::Communicator* sync)
      : add_(shortcut && c1 == c2) {
    const int64_t c = int64_t(double(c2) * e);
    cv1_ = register_module("cv1", conv(c1, c, k0, sync));
    cv2_ = register_module("cv2", conv(c, c2, k1, sync, 1, g));
  }
  at::Tensor forward(const at::Tensor& x) {
    auto y = cv2_(cv1_(x));
    return add_ ? x + y : y;
  }

 private:
  Conv cv1_{nullptr}, cv2_{nullptr};
  bool add_;
};
TORCH_MODULE(Bottleneck);

// C3 with n Bottlenecks of k x k (C3k): cv3(cat(m(cv1(x)), cv2(x))).
class C3kImpl : public torch::nn::Module {
 public:
  C3kImpl(int64_t c1, int64_t c2, int64_t n, bool shortcut, int64_t g, double e, int64_t k, comm::Communicator* sync) {
    const int64_t c = int64_t(double(c2) * e);
    cv1_ = register_module("cv1", conv(c1, c, 1, sync));
    cv2_ = register_module("cv2", conv(c1, c, 1, sync));
    cv3_ = register_module("cv3", conv(2 * c, c2, 1, sync));
    m_ = register_module("m", Chain());
    for (int64_t i = 0; i < n; ++i) m_->add(Bottleneck(c, c, shortcut, g, k, k, 1.0, sync));
  }
  at::Tensor forward(const at::Tensor& x) { return cv3_(at::cat({m_(cv1_(x)), cv2_(x)}, 1)); }

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
          comm::Communicator* sync)
      : c_(int64_t(double(c2) * e)) {
    cv1_ = register_module("cv1", conv(c1, 2 * c_, 1, sync));
    cv2_ = register_module("cv2", conv((2 + n) * c_, c2, 1, sync));
    m_ = register_module("m", Chain());
    for (int64_t i = 0; i < n; ++i) {
      if (block == C2fBlock::kC3k)
        m_->add(C3k(c_, c_, 2, shortcut, g, 0.5, 3, sync));
      else
        m_->add(Bottleneck(c_, c_, shortcut, g, 3, 3, block == C2fBlock::kBottleneck ? 1.0 : 0.5, sync));
    }
  }
  at::Tensor forward(const at::Tensor& x) {
    std::vector<at::Tensor> y = cv1_(x).chunk(2, 1);
    for (size_t i = 0; i < m_->size(); ++i) y.push_back(m_->run(i, y.back()));
    return cv2_(at::cat(y, 1));
  }

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

class SPPFImpl : public torch::nn::Module {
 public:
  SPPFImpl(int64_t c1, int64_t c2, int64_t k, comm::Communicator* sync) : k_(k) {
    cv1_ = register_module("cv1", conv(c1, c1 / 2, 1, sync));
    cv2_ = register_module("cv2", conv(c1 / 2 * 4, c2, 1, sync));
  }
  at::Tensor forward(const at::Tensor& x) {
    std::vector<at::Tensor> y{cv1_(x)};
    for (int i = 0; i < 3; ++i) y.push_back(at::max_pool2d(y.back(), {k_, k_}, {1, 1}, {k_ / 2, k_ / 2}));
    return cv2_(at::cat(y, 1));
  }

 private:
  int64_t k_;
  Conv cv1_{nullptr}, cv2_{nullptr};
};
TORCH_MODULE(SPPF);

// softmax(q^T k * scale) in float (as autocast does), back to v's dtype.
at::Tensor attention_weights(const at::Tensor& q, const at::Tensor& k, double scale, at::ScalarType dtype) {
  return at::softmax(at::matmul(q.transpose(-2, -1), k) * scale, -1, at::kFloat).to(dtype);
}

// C2PSA's Attention: qkv channels per head [q (key_dim) | k (key_dim) | v (head_dim)].
class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(int64_t dim, int64_t heads, double attn_ratio, comm::Communicator* sync)
      : heads_(heads), head_dim_(dim / heads), key_dim_(int64_t(double(dim / heads) * attn_ratio)) {
    qkv_ = register_module("qkv", conv(dim, dim + 2 * key_dim_ * heads, 1, sync, 1, 1, false));
    proj_ = register_module("proj", conv(dim, dim, 1, sync, 1, 1, false));
    pe_ = register_module("pe", conv(dim, dim, 3, sync, 1, dim, false));
  }
  at::Tensor forward(const at::Tensor& x) {
    const int64_t b = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
    const auto qkv = qkv_(x).view({b, heads_, 2 * key_dim_ + head_dim_, h * w});
    const auto q = qkv.narrow(2, 0, key_dim_), k = qkv.narrow(2, key_dim_, key_dim_);
    const auto v = qkv.narrow(2, 2 * key_dim_, head_dim_);
    const auto attn = attention_weights(q, k, std::pow(double(key_dim_), -0.5), v.scalar_type());
    const auto y = at::matmul(v, attn.transpose(-2, -1)).reshape({b, c, h, w}) + pe_(v.reshape({b, c, h, w}));
    return proj_(y);
  }
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
  at::Tensor forward(const at::Tensor& x) {
    const auto y = x + attn_(x);
    return y + mlp_(y);
  }

 private:
  Fn attn_;
  Chain mlp_{nullptr};
};
TORCH_MODULE(AttnBlock);

AttnBlock psa_block(int64_t c, int64_t heads, comm::Communicator* sync) {
  return AttnBlock(Attention(c, heads, 0.5, sync), c, 2 * c, "ffn", sync);
}

class C2PSAImpl : public torch::nn::Module {
 public:
  C2PSAImpl(int64_t c1, int64_t n, double e, comm::Communicator* sync) : c_(int64_t(double(c1) * e)) {
    cv1_ = register_module("cv1", conv(c1, 2 * c_, 1, sync));
    cv2_ = register_module("cv2", conv(2 * c_, c1, 1, sync));
    m_ = register_module("m", Chain());
    for (int64_t i = 0; i < n; ++i) m_->add(psa_block(c_, c_ / 64, sync));
  }
  at::Tensor forward(const at::Tensor& x) {
    const auto parts = cv1_(x).split(c_, 1);
    return cv2_(at::cat({parts[0], m_(parts[1])}, 1));
  }

 private:
  int64_t c_;
  Conv cv1_{nullptr}, cv2_{nullptr};
  Chain m_{nullptr};
};
TORCH_MODULE(C2PSA);

// YOLO12's area attention: qkv channels per head [q | k | v] (head_dim each); the (H*W) tokens are
// cut into `area` consecutive runs (horizontal strips when area divides H); then x + pe(v), proj.
class AAttnImpl : public torch::nn::Module {
 public:
  AAttnImpl(int64_t dim, int64_t heads, int64_t area, comm::Communicator* sync)
      : heads_(heads), head_dim_(dim / heads), area_(area) {
    qkv_ = register_module("qkv", conv(dim, 3 * dim, 1, sync, 1, 1, false));
    proj_ = register_module("proj", conv(dim, dim, 1, sync, 1, 1, false));
    pe_ = register_module("pe", conv(dim, dim, 7, sync, 1, dim, false, 3));
  }
  at::Tensor forward(const at::Tensor& x) {
    const int64_t b = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3), n = h * w;
    const int64_t a = area_ > 1 ? area_ : 1;
    if (n % a != 0)
      throw std::invalid_argument("yolo: area attention with " + std::to_string(a) + " areas over a " +
                                  std::to_string(h) + "x" + std::to_string(w) + " map (" + std::to_string(n) +
                                  " tokens, not divisible)");
    // [B, 3C, H, W] -> [B*a, n/a, heads, 3*head_dim] -> [B*a, heads, 3*head_dim, n/a]
    const auto qkv =
        qkv_(x).flatten(2).transpose(1, 2).reshape({b * a, n / a, heads_, 3 * head_dim_}).permute({0, 2, 3, 1});
    const auto q = qkv.narrow(2, 0, head_dim_), k = qkv.narrow(2, head_dim_, head_dim_);
    const auto v = qkv.narrow(2, 2 * head_dim_, head_dim_);
    const auto attn = attention_weights(q, k, std::pow(double(head_dim_), -0.5), v.scalar_type());
    auto to_map = [&](const at::Tensor& t) {  // [B*a, heads, head_dim, n/a] -> [B, C, H, W]
      return t.permute({0, 3, 1, 2}).reshape({b, h, w, c}).permute({0, 3, 1, 2}).contiguous();
    };
    const auto y = to_map(at::matmul(v, attn.transpose(-2, -1)));
    return proj_(y + pe_(to_map(v)));
  }
  double matmul_flops(double n) const {  // q^T k and v attn^T within each area
    return 2.0 * 2.0 * n * (n / double(std::max<int64_t>(area_, 1))) * double(heads_ * head_dim_);
  }

 private:
  int64_t heads_, head_dim_, area_;
  Conv qkv_{nullptr}, proj_{nullptr}, pe_{nullptr};
};
TORCH_MODULE(AAttn);

AttnBlock a_block(int64_t dim, int64_t heads, double mlp_ratio, int64_t area, comm::Communicator* sync) {
  AttnBlock block(AAttn(dim, heads, area, sync), dim, int64_t(double(dim) * mlp_ratio), "mlp", sync);
  // Ultralytics' ABlock._init_weights: trunc_normal_(std=0.02) on its convolutions (cut at +-2,
  // 100 standard deviations: a plain normal draw).
  at::NoGradGuard no_grad;
  for (const auto& m : block->modules(/*include_self=*/false))
    if (auto* c = m->as<torch::nn::Conv2d>()) c->weight.normal_(0.0, 0.02);
  return block;
}

class A2C2fImpl : public torch::nn::Module {
 public:
  A2C2fImpl(int64_t c1, int64_t c2, int64_t n, bool a2, int64_t area, bool residual, double mlp_ratio, double e,
            int64_t g, bool shortcut, comm::Communicator* sync) {
    const int64_t c = int64_t(double(c2) * e);
    cv1_ = register_module("cv1", conv(c1, c, 1, sync));
    cv2_ = register_module("cv2", conv((1 + n) * c, c2, 1, sync));
    if (a2 && residual) gamma_ = register_parameter("gamma", at::full({c2}, 0.01));
    m_ = register_module("m", Chain());
    for (int64_t i = 0; i < n; ++i) {
      if (a2) {
        Chain pair;
        pair->add(a_block(c, c / 32, mlp_ratio, area, sync));
        pair->add(a_block(c, c / 32, mlp_ratio, area, sync));
        m_->add(pair);
      } else {
        m_->add(C3k(c, c, 2, shortcut, g, 0.5, 3, sync));
      }
    }
  }
  at::Tensor forward(const at::Tensor& x) {
    std::vector<at::Tensor> y{cv1_(x)};
    for (size_t i = 0; i < m_->size(); ++i) y.push_back(m_->run(i, y.back()));
    const auto out = cv2_(at::cat(y, 1));
    return gamma_.defined() ? x + gamma_.view({1, -1, 1, 1}) * out : out;
  }

 private:
  Conv cv1_{nullptr}, cv2_{nullptr};
  at::Tensor gamma_;
  Chain m_{nullptr};
};
TORCH_MODULE(A2C2f);

class UpsampleImpl : public torch::nn::Module {
 public:
  explicit UpsampleImpl(int64_t factor) : factor_(factor) {}
  at::Tensor forward(const at::Tensor& x) {
    return at::upsample_nearest2d(x, std::vector<int64_t>{x.size(2) * factor_, x.size(3) * factor_});
  }

 private:
  int64_t factor_;
};
TORCH_MODULE(Upsample);

class ConcatImpl : public torch::nn::Module {};  // cat along channels (run by YoloImpl::forward)
TORCH_MODULE(Concat);

// The DFL's fixed 1x1 convolution 0..reg_max-1 (parameter "conv.weight", not trained).
class DFLImpl : public torch::nn::Module {
 public:
  explicit DFLImpl(int64_t bins) {
    auto conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(bins, 1, 1).bias(false)));
    conv->weight.set_requires_grad(false);
    at::NoGradGuard no_grad;
    conv->weight.copy_(at::arange(bins, at::kFloat).view({1, bins, 1, 1}));
  }
};
TORCH_MODULE(DFL);

class DetectImpl : public torch::nn::Module {
 public:
  DetectImpl(int64_t nc, int64_t reg_max, const std::vector<int64_t>& ch, const std::vector<int64_t>& strides,
             bool legacy, comm::Communicator* sync) {
    const int64_t c2 = std::max({int64_t{16}, ch[0] / 4, reg_max * 4}),
                  c3 = std::max(ch[0], std::min(nc, int64_t{100}));
    cv2_ = register_module("cv2", torch::nn::ModuleList());
    cv3_ = register_module("cv3", torch::nn::ModuleList());
    for (size_t i = 0; i < ch.size(); ++i) {
      const int64_t x = ch[i];
      Chain box;
      box->add(conv(x, c2, 3, sync));
      box->add(conv(c2, c2, 3, sync));
      auto box_out = box->add(torch::nn::Conv2d(torch::nn::Conv2dOptions(c2, 4 * reg_max, 1)));
      Chain cls;
      if (legacy) {
        cls->add(conv(x, c3, 3, sync));
        cls->add(conv(c3, c3, 3, sync));
      } else {  // DWConv(x, x, 3) + Conv(x, c3, 1), then the same at c3
        for (const auto& [in, out] : {std::pair{x, c3}, std::pair{c3, c3}}) {
          Chain pair;
          pair->add(conv(in, in, 3, sync, 1, in));
          pair->add(conv(in, out, 1, sync));
          cls->add(pair);
        }
      }
      auto cls_out = cls->add(torch::nn::Conv2d(torch::nn::Conv2dOptions(c3, nc, 1)));
      {  // Ultralytics' Detect.bias_init: box logits 1.0, classes ~5 objects per 640 px image
        at::NoGradGuard no_grad;
        box_out->bias.fill_(1.0);
        cls_out->bias.fill_(std::log(5.0 / double(nc) / std::pow(640.0 / double(strides[i]), 2)));
      }
      cv2_->push_back(box);
      cv3_->push_back(cls);
    }
    register_module("dfl", DFL(reg_max));
  }
  std::vector<at::Tensor> forward(const std::vector<at::Tensor>& xs) {
    std::vector<at::Tensor> out;
    for (size_t i = 0; i < xs.size(); ++i)
      out.push_back(at::cat({(*cv2_)[i]->as<Chain>()->forward(xs[i]), (*cv3_)[i]->as<Chain>()->forward(xs[i])}, 1));
    return out;
  }
  torch::nn::Module& branch(size_t i, bool cls) { return *(cls ? cv3_ : cv2_)[i]; }

 private:
  torch::nn::ModuleList cv2_{nullptr}, cv3_{nullptr};
};
TORCH_MODULE(Detect);

}  // namespace ultralytics

namespace {

// ---- Reading a model YAML.

std::string scalar_text(const YAML::Node& n) { return n.IsScalar() ? n.Scalar() : YAML::Dump(n); }

YoloLayerSpec parse_row(const YAML::Node& row, const std::string& source, const std::string& field) {
  if (!row.IsSequence() || row.size() != 4 || !row[3].IsSequence())
    throw ConfigError(source, field, "expected [from, repeats, module, [args]], got " + YAML::Dump(row));
  YoloLayerSpec s;
  s.field = field;
  try {
    if (row[0].IsSequence()) {
      for (const auto& f : row[0]) s.from.push_back(f.as<int64_t>());
    } else {
      s.from.push_back(row[0].as<int64_t>());
    }
    s.repeats = row[1].as<int64_t>();
    s.module = row[2].as<std::string>();
  } catch (const YAML::Exception&) {
    throw ConfigError(source, field,
                      "expected [from (an index or a list), repeats, module, [args]], got " + YAML::Dump(row));
  }
  if (s.from.empty() || s.repeats < 1) throw ConfigError(source, field, "needs a `from` and repeats >= 1");
  for (const auto& a : row[3]) s.args.push_back(scalar_text(a));
  return s;
}

}  // namespace

YoloSpec YoloSpec::parse(const std::string& text, const std::string& source, const std::string& family) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(source, "yaml", std::string("not YAML: ") + e.what());
  }
  if (!root.IsMap()) throw ConfigError(source, "yaml", "expected a model description (nc, scales, backbone, head)");
  YoloSpec s;
  s.source = source;
  s.family = family;
  s.text = text;
  try {
    if (root["nc"]) s.nc = root["nc"].as<int64_t>();
    if (root["scale"]) s.scale = root["scale"].as<std::string>();
  } catch (const YAML::Exception&) {
    throw ConfigError(source, root["nc"] && !root["scale"] ? "nc" : "scale", "unexpected value");
  }
  if (s.nc < 1) throw ConfigError(source, "nc", "must be at least 1");
  if (const auto scales = root["scales"]) {
    if (!scales.IsMap()) throw ConfigError(source, "scales", "expected a map n: [depth, width, max_channels]");
    for (const auto& item : scales) {
      const std::string name = item.first.as<std::string>();
      std::array<double, 3> v{};
      bool ok = item.second.IsSequence() && item.second.size() == 3;
      for (size_t i = 0; ok && i < 3; ++i) {
        try {
          v[i] = item.second[i].as<double>();
        } catch (const YAML::Exception&) {
          ok = false;
        }
        ok = ok && v[i] > 0 && std::isfinite(v[i]);
      }
      if (!ok) throw ConfigError(source, "scales." + name, "expected [depth, width, max_channels] of positive numbers");
      s.scales.emplace_back(name, v);
    }
  }
  try {
    if (root["depth_multiple"]) s.multiples[0] = root["depth_multiple"].as<double>();
    if (root["width_multiple"]) s.multiples[1] = root["width_multiple"].as<double>();
  } catch (const YAML::Exception&) {
    throw ConfigError(source, "depth_multiple", "expected numbers for depth_multiple and width_multiple");
  }
  for (const char* part : {"backbone", "head"}) {
    const auto rows = root[part];
    if (!rows || !rows.IsSequence() || rows.size() == 0)
      throw ConfigError(source, part, "missing: a model YAML lists its `backbone` and `head` rows");
    for (size_t i = 0; i < rows.size(); ++i)
      s.layers.push_back(parse_row(rows[i], source, std::string(part) + "[" + std::to_string(i) + "]"));
  }
  return s;
}

const std::vector<std::string>& builtin_yolo_families() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& y : kYoloYamls) v.push_back(y.family);
    return v;
  }();
  return names;
}

namespace {

const char* builtin_text(const std::string& family) {
  for (const auto& y : kYoloYamls)
    if (family == y.family) return y.text;
  return nullptr;
}

std::string read_text(const std::string& path, const std::string& origin) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (!in) throw ConfigError(origin, "model.yaml", "cannot read " + path);
  return buffer.str();
}

// "dir/yolo11n.yaml" -> {"dir/yolo11.yaml", "n"}; {"", ""} when the name has no scale letter
// (Ultralytics' guess_model_scale and its unified path).
std::pair<std::string, std::string> split_scale(const std::string& path) {
  static const std::regex pattern(R"(^(.*yolo(?:e-)?v?\d+)([nslmx])((?:-[^/]*)?\.ya?ml)?$)");
  std::smatch m;
  if (!std::regex_match(path, m, pattern)) return {"", ""};
  return {m[1].str() + (m[3].matched ? m[3].str() : std::string()), m[2].str()};
}

std::string stem(const std::string& path) { return std::filesystem::path(path).stem().string(); }

// The YAML model.yaml names and the scale its name carries.
std::pair<YoloSpec, std::string> resolve_yaml(const std::string& given, const std::string& origin) {
  namespace fs = std::filesystem;
  if (fs::is_regular_file(given)) {  // its family without a scale letter (export names the YAML after it)
    const auto [unified_name, letter] = split_scale(given);
    return {YoloSpec::parse(read_text(given, origin), given, stem(unified_name.empty() ? given : unified_name)),
            letter};
  }
  const auto [unified, letter] = split_scale(given);
  if (!unified.empty() && fs::is_regular_file(unified))
    return {YoloSpec::parse(read_text(unified, origin), unified, stem(unified)), letter};
  for (const auto& [name, scale] : {std::pair{given, std::string()}, std::pair{unified, letter}}) {
    if (name.empty() || name.find('/') != std::string::npos) continue;
    const std::string family = stem(name);
    if (const char* text = builtin_text(family))
      return {YoloSpec::parse(text, "built-in " + family + ".yaml", family), scale};
  }
  std::string known;
  for (const auto& f : builtin_yolo_families()) known += (known.empty() ? "" : ", ") + f + ".yaml";
  throw ConfigError(
      origin, "model.yaml",
      "'" + given + "' is neither a file nor a built-in model YAML (" + known + ", with a scale letter: yolo11n.yaml)");
}

// Picks the scale (given, the name's letter, the YAML's scale:, else its first) and sets the multiples.
void apply_scale(YoloConfig& s, const std::string& given, const std::string& letter, const std::string& origin) {
  const auto& spec = s.spec;
  std::string scale = !given.empty() ? given : !letter.empty() ? letter : spec.scale;
  if (spec.scales.empty()) {
    if (!given.empty())
      throw ConfigError(origin, "model.scale",
                        spec.source + " has no scales (it gives depth_multiple and width_multiple)");
    s.scale.clear();
    s.depth = spec.multiples[0], s.width = spec.multiples[1], s.max_channels = int64_t(spec.multiples[2]);
    return;
  }
  if (scale.empty()) scale = spec.scales.front().first;
  std::string names;
  for (const auto& [name, v] : spec.scales) {
    names += (names.empty() ? "" : ", ") + name;
    if (name != scale) continue;
    s.scale = scale;
    s.depth = v[0], s.width = v[1], s.max_channels = int64_t(v[2]);
    return;
  }
  throw ConfigError(origin, "model.scale",
                    "'" + scale + "' is not one of " + spec.source + "'s scales (" + names + ")");
}

const ConfigBinding<YoloConfig>& yolo_bindings() {
  using S = YoloConfig;
  static const auto table = [] {
    ConfigBinding<S> b;
    b.string(
        "model.yaml", &S::yaml,
        "Ultralytics model YAML: a file, or built-in yolov8.yaml, yolo11.yaml, yolo12.yaml (yolo11n.yaml: scale n)");
    b.string("model.yaml_text", &S::yaml_text,
             "the model YAML's text, used instead of reading model.yaml (training records a file's here, so that "
             "eval, export and predict do not need the file)");
    b.string("model.scale", &S::scale, "scale of the model YAML (n, s, m, l, x)")
        .defaults_to("the letter in model.yaml's name, else the YAML's first scale");
    b.integer("model.num_classes", &S::num_classes, "object classes")
        .at_least(1)
        .defaults_to("the dataset's class count (else the YAML's nc)");
    b.number("model.depth", &S::depth, "block repeat multiple").above(0).defaults_to("the scale's");
    b.number("model.width", &S::width, "channel multiple").above(0).defaults_to("the scale's");
    b.integer("model.max_channels", &S::max_channels, "cap on a row's channels before model.width")
        .at_least(8)
        .defaults_to("the scale's");
    b.boolean("model.sync_bn", &S::sync_bn, "BatchNorm statistics over all ranks (small per-rank batches)");
    return b;
  }();
  return table;
}

}  // namespace

void YoloConfig::declare(ConfigSchema& schema) { yolo_bindings().declare(schema); }

YoloConfig YoloConfig::from_config(const Config& c) {
  const std::string& origin = c.origin();
  YoloConfig s = yolo_bindings().read(c);
  auto [spec, letter] = [&]() -> std::pair<YoloSpec, std::string> {
    if (s.yaml_text.empty()) return resolve_yaml(s.yaml, c.has("model.yaml") ? c.source("model.yaml") : origin);
    const auto [unified, scale_letter] = split_scale(s.yaml);
    return {YoloSpec::parse(s.yaml_text, "model.yaml_text (" + s.yaml + ")", stem(unified.empty() ? s.yaml : unified)),
            scale_letter};
  }();
  s.spec = std::move(spec);
  const YoloConfig given = s;
  apply_scale(s, c.has("model.scale") ? given.scale : "", letter,
              c.has("model.scale") ? c.source("model.scale") : origin);
  if (c.has("model.depth")) s.depth = given.depth;
  if (c.has("model.width")) s.width = given.width;
  if (c.has("model.max_channels")) s.max_channels = given.max_channels;
  if (!c.has("model.num_classes")) s.num_classes = s.spec.nc;
  const auto check = [&](bool ok, const char* key, const char* problem) {
    if (!ok) throw ConfigError(c.has(key) ? c.source(key) : origin, key, problem);
  };
  check(s.num_classes >= 1, "model.num_classes", "must be at least 1");
  check(s.depth > 0 && std::isfinite(s.depth), "model.depth", "must be a positive number");
  check(s.width > 0 && std::isfinite(s.width), "model.width", "must be a positive number");
  check(s.max_channels >= 8, "model.max_channels", "must be at least 8");
  return s;
}

YoloConfig YoloConfig::builtin(const std::string& family, const std::string& scale, int64_t num_classes) {
  YoloConfig s;
  s.yaml = family + ".yaml";
  auto [spec, letter] = resolve_yaml(s.yaml, "YoloConfig::builtin");
  s.spec = std::move(spec);
  apply_scale(s, scale, letter, "YoloConfig::builtin");
  s.num_classes = num_classes;
  return s;
}

// ---- Building the graph (Ultralytics' parse_model).

namespace {

enum Kind { kPlain = 0, kConcat = 1, kDetect = 2 };

// A row's arguments after parse_model's rewriting, read by position with Ultralytics' defaults.
struct Args {
  const YoloSpec& spec;
  const YoloLayerSpec& row;
  std::vector<std::string> values;

  [[noreturn]] void fail(size_t i, const std::string& expected) const {
    throw ConfigError(spec.source, row.field,
                      row.module + " argument " + std::to_string(i) + " '" + values.at(i) + "' is not " + expected);
  }
  bool absent(size_t i) const {
    return i >= values.size() || values[i] == "None" || values[i] == "null" || values[i] == "~";
  }
  template <class T, class Parse>
  T parsed(size_t i, T fallback, Parse parse, const std::string& expected) const {
    if (absent(i)) return fallback;
    try {
      size_t used = 0;
      const T v = parse(values[i], &used);
      if (used == values[i].size()) return v;
    } catch (const std::exception&) {
    }
    fail(i, expected);
  }
  int64_t integer(size_t i, int64_t fallback) const {
    return parsed<int64_t>(
        i, fallback, [](const std::string& t, size_t* used) { return std::stoll(t, used); }, "an integer");
  }
  double number(size_t i, double fallback) const {
    return parsed<double>(
        i, fallback, [](const std::string& t, size_t* used) { return std::stod(t, used); }, "a number");
  }
  bool flag(size_t i, bool fallback) const {
    if (absent(i)) return fallback;
    const std::string& v = values[i];
    if (v == "True" || v == "true") return true;
    if (v == "False" || v == "false") return false;
    fail(i, "True or False");
  }
};

int64_t make_divisible(double x, int64_t d) { return int64_t(std::ceil(x / double(d))) * d; }

}  // namespace

YoloImpl::YoloImpl(const YoloConfig& config, comm::Communicator* sync_comm)
    : config_(config), sync_(config.sync_bn ? sync_comm : nullptr) {
  const YoloSpec& spec = config.spec;
  const std::string& src = spec.source;
  if (config.num_classes < 1) throw ConfigError(src, "model.num_classes", "must be at least 1");
  if (!(config.depth > 0) || !(config.width > 0) || config.max_channels < 1)
    throw ConfigError(src, "model.width", "depth, width and max_channels must be positive");
  comm::Communicator* const sync = sync_;
  const int64_t nc = config.num_classes;
  layers_ = register_module("model", torch::nn::ModuleList());
  std::vector<int64_t> ch, stride;  // per row: output channels and stride
  bool legacy = true;               // Detect's YOLOv8 class branch unless a C3k2 / A2C2f row came first
  const int64_t rows = int64_t(spec.layers.size());
  for (int64_t i = 0; i < rows; ++i) {
    const YoloLayerSpec& row = spec.layers[size_t(i)];
    auto fail = [&](const std::string& problem) { throw ConfigError(src, row.field, row.module + ": " + problem); };
    std::vector<int64_t> from;
    for (int64_t f : row.from) {
      const int64_t j = f < 0 ? i + f : f;
      if (j < -1 || j >= i || (j == -1 && i > 0)) fail("from " + std::to_string(f) + " is not an earlier row");
      from.push_back(j);
    }
    auto ch_of = [&](int64_t j) { return j < 0 ? int64_t{3} : ch[size_t(j)]; };
    auto stride_of = [&](int64_t j) { return j < 0 ? int64_t{1} : stride[size_t(j)]; };
    Args a{spec, row, row.args};
    for (auto& v : a.values)
      if (v == "nc") v = std::to_string(nc);
    const int64_t n =
        row.repeats > 1 ? std::max<int64_t>(1, int64_t(std::nearbyint(double(row.repeats) * config.depth))) : 1;
    const int64_t c1 = ch_of(from[0]);
    int64_t c2 = c1, out_stride = stride_of(from[0]);
    int kind = kPlain;
    ultralytics::Fn fn;
    auto adopt = [&](auto layer) {  // the row's module: "model.<i>", run by fn
      fn = [layer](const at::Tensor& x) mutable { return layer->forward(x); };
      layers_->push_back(layer);
    };
    auto chain = [&](auto make) {  // n > 1 of a module that does not take repeats: nn.Sequential of n
      if (n == 1) return adopt(make(c1));
      ultralytics::Chain seq;
      for (int64_t k = 0; k < n; ++k) seq->add(make(k == 0 ? c1 : c2));
      adopt(seq);
    };
    const std::string& m = row.module;
    const bool wide_or_m = config.scale == "m" || config.scale == "l" || config.scale == "x";
    const bool base = m == "Conv" || m == "C2f" || m == "C3k2" || m == "SPPF" || m == "C2PSA" || m == "A2C2f";
    if (base) {
      if (a.values.empty()) fail("needs its output channels as the first argument");
      const int64_t given = a.integer(0, 0);
      c2 = given == nc ? given : make_divisible(double(std::min(given, config.max_channels)) * config.width, 8);
      if (c2 < 1) fail("output channels must be positive");
    }
    if (m == "Conv") {
      const int64_t k = a.integer(1, 1), s = a.integer(2, 1), p = a.integer(3, -1), g = a.integer(4, 1),
                    d = a.integer(5, 1);
      const bool act = a.flag(6, true);
      if (k < 1 || s < 1 || g < 1 || d < 1 || c1 % g != 0 || c2 % g != 0)
        fail("bad kernel, stride, groups or dilation");
      for (int64_t k = 0; k < n; ++k) out_stride *= s;  // each repeat strides again
      chain([&](int64_t in) { return ultralytics::Conv(in, c2, k, s, p, g, d, act, sync); });
    } else if (m == "C2f" || m == "C3k2") {
      bool shortcut = false, c3k = false;
      double e = 0.5;
      int64_t g = 1;
      if (m == "C2f") {
        shortcut = a.flag(1, false), g = a.integer(2, 1), e = a.number(3, 0.5);
      } else {
        legacy = false;
        if (wide_or_m && a.values.size() > 1) a.values[1] = "True";  // parse_model: C3k blocks at m, l, x
        c3k = a.flag(1, false);
        e = a.number(2, 0.5), g = a.integer(3, 1), shortcut = a.flag(4, true);
      }
      if (int64_t(double(c2) * e) < 1) fail("hidden width int(c2 * e) is 0");
      const auto block = m == "C2f" ? ultralytics::C2fBlock::kBottleneck
                         : c3k      ? ultralytics::C2fBlock::kC3k
                                    : ultralytics::C2fBlock::kHalfBottleneck;
      if (m == "C2f")
        adopt(ultralytics::C2f(c1, c2, n, shortcut, g, e, block, sync));
      else
        adopt(ultralytics::C3k2(c1, c2, n, shortcut, g, e, block, sync));
    } else if (m == "SPPF") {
      const int64_t k = a.integer(1, 5);
      if (k < 1 || k % 2 == 0) fail("the pooling kernel must be odd");
      chain([&](int64_t in) { return ultralytics::SPPF(in, c2, k, sync); });
    } else if (m == "C2PSA") {
      const double e = a.number(1, 0.5);
      const int64_t c = int64_t(double(c1) * e);
      if (c1 != c2) fail("input channels " + std::to_string(c1) + " differ from output " + std::to_string(c2));
      if (c < 64) fail("hidden width " + std::to_string(c) + " gives no attention head (heads = width / 64)");
      adopt(ultralytics::C2PSA(c1, n, e, sync));
    } else if (m == "A2C2f") {
      legacy = false;
      if (config.scale == "l" || config.scale == "x") {  // parse_model: args.extend((True, 1.2))
        a.values.push_back("True");
        a.values.push_back("1.2");
      }
      const bool a2 = a.flag(1, true), residual = a.flag(3, false);
      const int64_t area = a.integer(2, 1), g = a.integer(6, 1);
      const double mlp_ratio = a.number(4, 2.0), e = a.number(5, 0.5);
      const bool shortcut = a.flag(7, true);
      const int64_t c = int64_t(double(c2) * e);
      if (a2 && (c < 32 || c % 32 != 0))
        fail("hidden width " + std::to_string(c) + " is not a multiple of 32 (area-attention heads of 32 channels)");
      if (a2 && residual && c1 != c2)
        fail("residual with input channels " + std::to_string(c1) + " != " + std::to_string(c2));
      adopt(ultralytics::A2C2f(c1, c2, n, a2, area, residual, mlp_ratio, e, g, shortcut, sync));
    } else if (m == "nn.Upsample") {
      const int64_t factor = a.integer(1, 2);
      if (a.values.size() > 2 && a.values[2] != "nearest") fail("only mode 'nearest' is supported");
      if (factor < 1 || out_stride % factor != 0) fail("factor must divide the input's stride");
      out_stride /= factor;
      chain([&](int64_t) { return ultralytics::Upsample(factor); });
    } else if (m == "Concat") {
      if (a.integer(0, 1) != 1) fail("only dimension 1 (channels) is supported");
      kind = kConcat;
      c2 = 0;
      for (int64_t j : from) {
        c2 += ch_of(j);
        if (stride_of(j) != out_stride)
          fail("joins maps of strides " + std::to_string(stride_of(j)) + " and " + std::to_string(out_stride));
      }
      layers_->push_back(ultralytics::Concat());
    } else if (m == "Detect") {
      if (i != rows - 1) fail("must be the last row");
      kind = kDetect;
      std::vector<int64_t> in_ch;
      for (int64_t j : from) in_ch.push_back(ch_of(j)), strides_.push_back(stride_of(j));
      layers_->push_back(ultralytics::Detect(nc, config.reg_max, in_ch, strides_, legacy, sync));
    } else {
      fail("unknown module (meridian builds Conv, C2f, C3k2, SPPF, C2PSA, A2C2f, nn.Upsample, Concat, Detect)");
    }
    if (kind == kPlain && from.size() != 1) fail("takes one input");
    from_.push_back(from);
    kinds_.push_back(kind);
    run_.push_back(fn);
    in_stride_.push_back(stride_of(from[0]));
    ch.push_back(c2);
    stride.push_back(out_stride);
  }
  if (kinds_.empty() || kinds_.back() != kDetect)
    throw ConfigError(src, "head", "the last row must be Detect (meridian trains detection models)");
  keep_.assign(size_t(rows), false);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j : from_[size_t(i)])
      if (j >= 0 && j != i - 1) keep_[size_t(j)] = true;
}

std::vector<at::Tensor> YoloImpl::forward(const at::Tensor& images) {
  const int64_t max_stride = *std::max_element(strides_.begin(), strides_.end());
  if (images.dim() != 4 || images.size(1) != 3)
    throw std::invalid_argument("yolo: expected images [B, 3, H, W], got " + std::to_string(images.dim()) +
                                " dimensions");
  if (images.size(2) % max_stride != 0 || images.size(3) % max_stride != 0 || images.size(2) == 0 ||
      images.size(3) == 0)
    throw std::invalid_argument("yolo: image size " + std::to_string(images.size(2)) + "x" +
                                std::to_string(images.size(3)) + " is not a multiple of " + std::to_string(max_stride) +
                                " (the largest stride)");
  std::vector<at::Tensor> kept(kinds_.size());
  at::Tensor x = images;
  auto input = [&](int64_t i, int64_t j) { return j < 0 ? images : j == i - 1 ? x : kept[size_t(j)]; };
  for (size_t i = 0; i < kinds_.size(); ++i) {
    const auto& from = from_[i];
    std::vector<at::Tensor> inputs;
    for (int64_t j : from) inputs.push_back(input(int64_t(i), j));
    if (kinds_[i] == kDetect) return (*layers_)[i]->as<ultralytics::Detect>()->forward(inputs);
    x = kinds_[i] == kConcat ? at::cat(inputs, 1) : run_[i](inputs[0]);
    if (keep_[i]) kept[i] = x;
  }
  return {};  // unreachable: the last row is Detect
}

double YoloImpl::flops(int64_t image_size) const {
  const int64_t max_stride = *std::max_element(strides_.begin(), strides_.end());
  if (image_size <= 0 || image_size % max_stride != 0)
    throw std::invalid_argument("yolo: image size " + std::to_string(image_size) + " is not a positive multiple of " +
                                std::to_string(max_stride));
  double total = 0;
  // Every convolution of a module at input stride s: 2 * weight.numel() per output pixel.
  auto count = [&](const torch::nn::Module& module, int64_t in_stride) {
    const double side = double(image_size / in_stride);
    for (const auto& m : module.modules(/*include_self=*/true)) {
      if (const auto* c = m->as<torch::nn::Conv2d>()) {
        const double out = side / double((*c->options.stride())[0]);
        total += 2.0 * double(c->weight.numel()) * out * out;
      } else if (const auto* a = m->as<ultralytics::AAttnImpl>()) {
        total += a->matmul_flops(side * side);
      } else if (const auto* p = m->as<ultralytics::AttentionImpl>()) {
        total += p->matmul_flops(side * side);
      }
    }
  };
  for (size_t i = 0; i < kinds_.size(); ++i) {
    if (kinds_[i] != kDetect) {
      count(*(*layers_)[i], in_stride_[i]);
      continue;
    }
    auto* detect = (*layers_)[i]->as<ultralytics::DetectImpl>();
    for (size_t l = 0; l < strides_.size(); ++l)
      for (bool cls : {false, true}) count(detect->branch(l, cls), strides_[l]);
  }
  return total;
}

std::vector<std::string> load_ultralytics_weights(YoloImpl& model, const std::string& path) {
  LazyTensors tensors = open_safetensors(path);
  const std::string head = "model." + std::to_string(model.detect_index()) + ".cv3.";
  int64_t file_nc = -1;
  for (const auto& t : tensors)
    if (t.name == head + "0.2.bias" && t.shape.size() == 1) file_nc = t.shape[0];
  std::vector<std::string> kept_init;
  if (file_nc >= 0 && file_nc != model.config().num_classes) {
    // The class head was trained for other classes: its tensors of another shape keep the model's
    // initialisation (Ultralytics' intersect_dicts); the rest of it, and everything else, load.
    std::map<std::string, at::Tensor> own;
    for (const auto& p : model.named_parameters()) own[p.key()] = p.value();
    for (const auto& b : model.named_buffers()) own[b.key()] = b.value();
    std::map<std::string, size_t> in_file;
    for (size_t i = 0; i < tensors.size(); ++i) in_file[tensors[i].name] = i;
    for (const auto& [name, value] : own) {
      if (name.rfind(head, 0) != 0) continue;
      const auto it = in_file.find(name);
      if (it != in_file.end() && tensors[it->second].shape == value.sizes().vec()) continue;
      const at::Tensor init = value.detach().clone();
      LazyTensor replacement{name, value.sizes().vec(), init.scalar_type(), [init] { return init; }};
      if (it != in_file.end())
        tensors[it->second] = replacement;
      else
        tensors.push_back(replacement);
      kept_init.push_back(name);
    }
  }
  load_into(model, tensors, nullptr, path);
  return kept_init;
}

}  // namespace meridian::models
