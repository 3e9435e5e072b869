#include "yolo_modules.h"

#include <cmath>
#include <stdexcept>
#include <utility>

namespace meridian::models::ultralytics {

namespace {

// softmax(q^T k * scale) in float (as autocast does; double stays double), back to v's dtype.
at::Tensor attention_weights(const at::Tensor& q, const at::Tensor& k, double scale, at::ScalarType dtype) {
  const auto logits = at::matmul(q.transpose(-2, -1), k) * scale;
  return at::softmax(logits, -1, logits.scalar_type() == at::kDouble ? at::kDouble : at::kFloat).to(dtype);
}

AttnBlock psa_block(int64_t c, int64_t heads, comm::Communicator* sync) {
  return AttnBlock(Attention(c, heads, 0.5, sync), c, 2 * c, "ffn", sync);
}

AttnBlock a_block(int64_t dim, int64_t heads, double mlp_ratio, int64_t area, comm::Communicator* sync) {
  AttnBlock block(AAttn(dim, heads, area, sync), dim, int64_t(double(dim) * mlp_ratio), "mlp", sync);
  // Ultralytics' ABlock._init_weights: trunc_normal_(std=0.02) on its convolutions (cut at +-2,
  // 100 standard deviations: a plain normal draw).
  at::NoGradGuard no_grad;
  for (const auto& m : block->modules(/*include_self=*/false))
    if (auto* c = m->as<torch::nn::Conv2d>()) c->weight.normal_(0.0, 0.02);
  return block;
}

}  // namespace

ConvImpl::ConvImpl(int64_t c1, int64_t c2, int64_t k, int64_t s, int64_t p, int64_t g, int64_t d, bool act,
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

at::Tensor ConvImpl::forward(const at::Tensor& x) {
  auto y = sync_bn_ ? sync_bn_(conv_(x)) : bn_(conv_(x));
  return act_ ? at::silu(y) : y;
}

Conv conv(int64_t c1, int64_t c2, int64_t k, comm::Communicator* sync, int64_t s, int64_t g, bool act, int64_t p) {
  return Conv(c1, c2, k, s, p, g, 1, act, sync);
}

BottleneckImpl::BottleneckImpl(int64_t c1, int64_t c2, bool shortcut, int64_t g, int64_t k0, int64_t k1, double e,
                               comm::Communicator* sync)
    : add_(shortcut && c1 == c2) {
  const int64_t c = int64_t(double(c2) * e);
  cv1_ = register_module("cv1", conv(c1, c, k0, sync));
  cv2_ = register_module("cv2", conv(c, c2, k1, sync, 1, g));
}

at::Tensor BottleneckImpl::forward(const at::Tensor& x) {
  auto y = cv2_(cv1_(x));
  return add_ ? x + y : y;
}

C3kImpl::C3kImpl(int64_t c1, int64_t c2, int64_t n, bool shortcut, int64_t g, double e, int64_t k,
                 comm::Communicator* sync) {
  const int64_t c = int64_t(double(c2) * e);
  cv1_ = register_module("cv1", conv(c1, c, 1, sync));
  cv2_ = register_module("cv2", conv(c1, c, 1, sync));
  cv3_ = register_module("cv3", conv(2 * c, c2, 1, sync));
  m_ = register_module("m", Chain());
  for (int64_t i = 0; i < n; ++i) m_->add(Bottleneck(c, c, shortcut, g, k, k, 1.0, sync));
}

at::Tensor C3kImpl::forward(const at::Tensor& x) { return cv3_(at::cat({m_(cv1_(x)), cv2_(x)}, 1)); }

C2fImpl::C2fImpl(int64_t c1, int64_t c2, int64_t n, bool shortcut, int64_t g, double e, C2fBlock block,
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

at::Tensor C2fImpl::forward(const at::Tensor& x) {
  std::vector<at::Tensor> y = cv1_(x).chunk(2, 1);
  for (size_t i = 0; i < m_->size(); ++i) y.push_back(m_->run(i, y.back()));
  return cv2_(at::cat(y, 1));
}

SPPFImpl::SPPFImpl(int64_t c1, int64_t c2, int64_t k, comm::Communicator* sync) : k_(k) {
  cv1_ = register_module("cv1", conv(c1, c1 / 2, 1, sync));
  cv2_ = register_module("cv2", conv(c1 / 2 * 4, c2, 1, sync));
}

at::Tensor SPPFImpl::forward(const at::Tensor& x) {
  std::vector<at::Tensor> y{cv1_(x)};
  for (int i = 0; i < 3; ++i) y.push_back(at::max_pool2d(y.back(), {k_, k_}, {1, 1}, {k_ / 2, k_ / 2}));
  return cv2_(at::cat(y, 1));
}

AttentionImpl::AttentionImpl(int64_t dim, int64_t heads, double attn_ratio, comm::Communicator* sync)
    : heads_(heads), head_dim_(dim / heads), key_dim_(int64_t(double(dim / heads) * attn_ratio)) {
  qkv_ = register_module("qkv", conv(dim, dim + 2 * key_dim_ * heads, 1, sync, 1, 1, false));
  proj_ = register_module("proj", conv(dim, dim, 1, sync, 1, 1, false));
  pe_ = register_module("pe", conv(dim, dim, 3, sync, 1, dim, false));
}

at::Tensor AttentionImpl::forward(const at::Tensor& x) {
  const int64_t b = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const auto qkv = qkv_(x).view({b, heads_, 2 * key_dim_ + head_dim_, h * w});
  const auto q = qkv.narrow(2, 0, key_dim_), k = qkv.narrow(2, key_dim_, key_dim_);
  const auto v = qkv.narrow(2, 2 * key_dim_, head_dim_);
  const auto attn = attention_weights(q, k, std::pow(double(key_dim_), -0.5), v.scalar_type());
  const auto y = at::matmul(v, attn.transpose(-2, -1)).reshape({b, c, h, w}) + pe_(v.reshape({b, c, h, w}));
  return proj_(y);
}

at::Tensor AttnBlockImpl::forward(const at::Tensor& x) {
  const auto y = x + attn_(x);
  return y + mlp_(y);
}

C2PSAImpl::C2PSAImpl(int64_t c1, int64_t n, double e, comm::Communicator* sync) : c_(int64_t(double(c1) * e)) {
  cv1_ = register_module("cv1", conv(c1, 2 * c_, 1, sync));
  cv2_ = register_module("cv2", conv(2 * c_, c1, 1, sync));
  m_ = register_module("m", Chain());
  for (int64_t i = 0; i < n; ++i) m_->add(psa_block(c_, c_ / 64, sync));
}

at::Tensor C2PSAImpl::forward(const at::Tensor& x) {
  const auto parts = cv1_(x).split(c_, 1);
  return cv2_(at::cat({parts[0], m_(parts[1])}, 1));
}

AAttnImpl::AAttnImpl(int64_t dim, int64_t heads, int64_t area, comm::Communicator* sync)
    : heads_(heads), head_dim_(dim / heads), area_(area) {
  qkv_ = register_module("qkv", conv(dim, 3 * dim, 1, sync, 1, 1, false));
  proj_ = register_module("proj", conv(dim, dim, 1, sync, 1, 1, false));
  pe_ = register_module("pe", conv(dim, dim, 7, sync, 1, dim, false, 3));
}

at::Tensor AAttnImpl::forward(const at::Tensor& x) {
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

A2C2fImpl::A2C2fImpl(int64_t c1, int64_t c2, int64_t n, bool a2, int64_t area, bool residual, double mlp_ratio,
                     double e, int64_t g, bool shortcut, comm::Communicator* sync) {
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

at::Tensor A2C2fImpl::forward(const at::Tensor& x) {
  std::vector<at::Tensor> y{cv1_(x)};
  for (size_t i = 0; i < m_->size(); ++i) y.push_back(m_->run(i, y.back()));
  const auto out = cv2_(at::cat(y, 1));
  return gamma_.defined() ? x + gamma_.view({1, -1, 1, 1}) * out : out;
}

at::Tensor UpsampleImpl::forward(const at::Tensor& x) {
  return at::upsample_nearest2d(x, std::vector<int64_t>{x.size(2) * factor_, x.size(3) * factor_});
}

DFLImpl::DFLImpl(int64_t bins) {
  auto conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(bins, 1, 1).bias(false)));
  conv->weight.set_requires_grad(false);
  at::NoGradGuard no_grad;
  conv->weight.copy_(at::arange(bins, at::kFloat).view({1, bins, 1, 1}));
}

DetectImpl::DetectImpl(int64_t nc, int64_t reg_max, const std::vector<int64_t>& ch, const std::vector<int64_t>& strides,
                       bool legacy, comm::Communicator* sync) {
  const int64_t c2 = std::max({int64_t{16}, ch[0] / 4, reg_max * 4}), c3 = std::max(ch[0], std::min(nc, int64_t{100}));
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
    {  // Ultralytics' Detect.bias_init (8.4): box logits 2.0, classes ~5 objects per 640 px image
      at::NoGradGuard no_grad;
      box_out->bias.fill_(2.0);
      cls_out->bias.fill_(std::log(5.0 / double(nc) / std::pow(640.0 / double(strides[i]), 2)));
    }
    cv2_->push_back(box);
    cv3_->push_back(cls);
  }
  register_module("dfl", DFL(reg_max));
}

std::vector<at::Tensor> DetectImpl::forward(const std::vector<at::Tensor>& xs) {
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < xs.size(); ++i)
    out.push_back(at::cat({(*cv2_)[i]->as<Chain>()->forward(xs[i]), (*cv3_)[i]->as<Chain>()->forward(xs[i])}, 1));
  return out;
}

}  // namespace meridian::models::ultralytics
