#include "meridian/models/yolo.h"

#include <ATen/ATen.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/modules/container/sequential.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "meridian/core/config_binding.h"
#include "meridian/core/config_schema.h"
#include "meridian/core/error.h"

namespace meridian::models {

namespace {

// Base channels and repeats of the YOLOv12-like layout (see yolo.h); shared by the constructor and
// the closed forms so that they describe the same network.
struct Plan {
  int64_t stem, down1, stage1, down2, p3, down3, p4, down4, p5;
  int64_t td4, td3, bu4, bu5;
  int64_t n_backbone, n_attn, n_neck;
  int64_t box_hidden, cls_hidden;
};

Plan make_plan(const YoloConfig& c) {
  Plan p{};
  p.stem = c.channels(64);
  p.down1 = c.channels(128);
  p.stage1 = c.channels(256);
  p.down2 = c.channels(256);
  p.p3 = c.channels(512);
  p.down3 = c.channels(512);
  p.p4 = c.channels(512);
  p.down4 = c.channels(1024);
  p.p5 = c.channels(1024);
  p.td4 = c.channels(512);
  p.td3 = c.channels(256);
  p.bu4 = c.channels(512);
  p.bu5 = c.channels(1024);
  p.n_backbone = c.repeats(2);
  p.n_attn = c.repeats(4);
  p.n_neck = c.repeats(2);
  // YOLOv8 Detect: c2 = max(16, ch[0] / 4, 4 * reg_max), c3 = max(ch[0], min(nc, 100)).
  p.box_hidden = std::max({int64_t{16}, p.td3 / 4, 4 * c.reg_max});
  p.cls_hidden = std::max(p.td3, std::min(c.num_classes, int64_t{100}));
  return p;
}

// Closed-form parameter and FLOP tally, block by block, mirroring the constructors below.
struct Tally {
  int64_t params = 0;
  double flops = 0;

  // ConvBN (BatchNorm weight + bias) or, with bias, a plain Conv2d; hw = output pixels.
  void conv(int64_t in, int64_t out, int64_t k, int64_t groups, double hw, bool bias = false) {
    params += out * (in / groups) * k * k + (bias ? out : 2 * out);
    flops += 2.0 * double(k * k * (in / groups) * out) * hw;
  }
  void c2f(int64_t in, int64_t out, int64_t n, double e, double hw) {
    const int64_t c = int64_t(double(out) * e);
    conv(in, 2 * c, 1, 1, hw);
    for (int64_t i = 0; i < n; ++i) {
      conv(c, c, 3, 1, hw);
      conv(c, c, 3, 1, hw);
    }
    conv((2 + n) * c, out, 1, 1, hw);
  }
  void ablock(int64_t dim, int64_t hidden, double hw, int64_t areas) {
    conv(dim, 3 * dim, 1, 1, hw);                                  // qkv
    conv(dim, dim, 7, dim, hw);                                    // pe
    conv(dim, dim, 1, 1, hw);                                      // proj
    flops += 2.0 * 2.0 * hw * (hw / double(areas)) * double(dim);  // q k^T and attn v
    conv(dim, hidden, 1, 1, hw);
    conv(hidden, dim, 1, 1, hw);
  }
  void a2c2f(int64_t in, int64_t out, int64_t n, double mlp_ratio, double hw, int64_t areas) {
    const int64_t c = out / 2;
    conv(in, c, 1, 1, hw);
    for (int64_t i = 0; i < 2 * n; ++i) ablock(c, int64_t(double(c) * mlp_ratio), hw, areas);
    conv((1 + n) * c, out, 1, 1, hw);
    if (in == out) params += out;  // gamma
  }
};

Tally tally(const YoloConfig& c, int64_t size) {
  const Plan p = make_plan(c);
  Tally t;
  auto hw = [&](int64_t stride) { return double(size / stride) * double(size / stride); };
  t.conv(3, p.stem, 3, 1, hw(2));
  t.conv(p.stem, p.down1, 3, 1, hw(4));
  t.c2f(p.down1, p.stage1, p.n_backbone, 0.25, hw(4));
  t.conv(p.stage1, p.down2, 3, 1, hw(8));
  t.c2f(p.down2, p.p3, p.n_backbone, 0.25, hw(8));
  t.conv(p.p3, p.down3, 3, 1, hw(16));
  const int64_t rows16 = size / 16;
  const int64_t areas16 = (c.areas > 1 && rows16 % c.areas == 0) ? c.areas : 1;
  if (c.area_attention) {
    t.a2c2f(p.down3, p.p4, p.n_attn, c.mlp_ratio, hw(16), areas16);
  } else {
    t.c2f(p.down3, p.p4, p.n_attn, 0.5, hw(16));
  }
  t.conv(p.p4, p.down4, 3, 1, hw(32));
  if (c.area_attention) {
    t.a2c2f(p.down4, p.p5, p.n_attn, c.mlp_ratio, hw(32), 1);
  } else {
    t.c2f(p.down4, p.p5, p.n_attn, 0.5, hw(32));
  }
  t.c2f(p.p5 + p.p4, p.td4, p.n_neck, 0.5, hw(16));
  t.c2f(p.td4 + p.p3, p.td3, p.n_neck, 0.5, hw(8));
  t.conv(p.td3, p.td3, 3, 1, hw(16));
  t.c2f(p.td3 + p.td4, p.bu4, p.n_neck, 0.5, hw(16));
  t.conv(p.bu4, p.bu4, 3, 1, hw(32));
  t.c2f(p.bu4 + p.p5, p.bu5, p.n_neck, 0.5, hw(32));
  const int64_t level_channels[3] = {p.td3, p.bu4, p.bu5};
  for (int l = 0; l < 3; ++l) {
    const int64_t ch = level_channels[l];
    const double a = hw(yolo_strides()[size_t(l)]);
    t.conv(ch, p.box_hidden, 3, 1, a);
    t.conv(p.box_hidden, p.box_hidden, 3, 1, a);
    t.conv(p.box_hidden, 4 * c.reg_max, 1, 1, a, /*bias=*/true);
    t.conv(ch, ch, 3, ch, a);
    t.conv(ch, p.cls_hidden, 1, 1, a);
    t.conv(p.cls_hidden, p.cls_hidden, 3, p.cls_hidden, a);
    t.conv(p.cls_hidden, p.cls_hidden, 1, 1, a);
    t.conv(p.cls_hidden, c.num_classes, 1, 1, a, /*bias=*/true);
  }
  return t;
}

struct Preset {
  const char* name;
  double depth, width;
  int64_t max_channels;
};
constexpr Preset kPresets[] = {
    {"n", 0.50, 0.25, 1024}, {"s", 0.50, 0.50, 1024}, {"m", 0.50, 1.00, 512},
    {"l", 1.00, 1.00, 512},  {"x", 1.00, 1.50, 512},
};

// {field, problem} of the first invalid value; {"", ""} when all are valid.
std::pair<std::string, std::string> invalid_field(const YoloConfig& s) {
  if (s.num_classes < 1) return {"model.num_classes", "must be at least 1"};
  if (!(s.width > 0) || !std::isfinite(s.width)) return {"model.width", "must be a positive number"};
  if (!(s.depth > 0) || !std::isfinite(s.depth)) return {"model.depth", "must be a positive number"};
  if (s.max_channels < 8) return {"model.max_channels", "must be at least 8"};
  if (s.reg_max < 2) return {"model.reg_max", "must be at least 2 (DFL bins per side)"};
  if (s.areas < 1) return {"model.areas", "must be at least 1"};
  if (!(s.mlp_ratio > 0) || !std::isfinite(s.mlp_ratio)) return {"model.mlp_ratio", "must be a positive number"};
  return {"", ""};
}

}  // namespace

const std::vector<int64_t>& yolo_strides() {
  static const std::vector<int64_t> strides{8, 16, 32};
  return strides;
}

namespace {
// The model: keys of the detector, each bound to its field; model.scale first, so that the keys it
// presets can still be set after it.
const ConfigBinding<YoloConfig>& yolo_bindings() {
  using S = YoloConfig;
  static const auto table = [] {
    ConfigBinding<S> b;
    std::vector<std::string> scales;
    for (const auto& p : kPresets) scales.push_back(p.name);
    b.custom(
         [scales](ConfigSchema& schema) -> ConfigKey& {
           return schema.choice("model.scale", scales, std::nullopt,
                                "YOLOv12 scale: sets model.depth, model.width, model.max_channels (each may still be "
                                "set)");
         },
         [](const Config& c, S& s) {
           if (!c.has("model.scale")) return;
           const auto scale = c.get<std::string>("model.scale");
           const Preset* found = nullptr;
           for (const auto& p : kPresets)
             if (scale == p.name) found = &p;
           if (!found)
             throw ConfigError(c.origin(), "model.scale", "expected one of n, s, m, l, x, got '" + scale + "'");
           s.depth = found->depth;
           s.width = found->width;
           s.max_channels = found->max_channels;
         })
        .defaults_to("model.depth, model.width and model.max_channels as given");
    b.integer("model.num_classes", &S::num_classes, "object classes")
        .at_least(1)
        .defaults_to("the dataset's class count");
    b.number("model.width", &S::width, "channel multiplier").above(0);
    b.number("model.depth", &S::depth, "block repeat multiplier").above(0);
    b.integer("model.max_channels", &S::max_channels, "cap on a layer's base channels, before model.width").at_least(8);
    b.integer("model.reg_max", &S::reg_max, "DFL bins per box side").at_least(2);
    b.boolean("model.area_attention", &S::area_attention, "area attention (A2C2f) in the P4 and P5 stages");
    b.integer("model.areas", &S::areas, "strips of the P4 area attention").at_least(1);
    b.number("model.mlp_ratio", &S::mlp_ratio, "A2C2f MLP width / its channels").above(0);
    b.boolean("model.sync_bn", &S::sync_bn, "BatchNorm statistics over all ranks (small per-rank batches)");
    return b;
  }();
  return table;
}
}  // namespace

void YoloConfig::declare(ConfigSchema& schema) { yolo_bindings().declare(schema); }

YoloConfig YoloConfig::from_config(const Config& c) {
  YoloConfig s = yolo_bindings().read(c);
  const std::string& f = c.origin();
  const auto [field, problem] = invalid_field(s);
  if (!field.empty()) throw ConfigError(f, field, problem);
  return s;
}

int64_t YoloConfig::channels(int64_t base) const {
  const double scaled = double(std::min(base, max_channels)) * width;
  return std::max<int64_t>(8, int64_t(std::ceil(scaled / 8.0)) * 8);
}

int64_t YoloConfig::repeats(int64_t base) const { return std::max<int64_t>(1, std::llround(double(base) * depth)); }

int64_t YoloConfig::parameter_count() const { return tally(*this, 32).params; }

double YoloConfig::flops(int64_t image_size) const {
  if (image_size <= 0 || image_size % 32 != 0)
    throw std::invalid_argument("yolo: image size " + std::to_string(image_size) + " is not a positive multiple of 32");
  return tally(*this, image_size).flops;
}

ConvBNImpl::ConvBNImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t groups, bool act,
                       comm::Communicator* sync)
    : act_(act) {
  conv_ = register_module(
      "conv",
      torch::nn::Conv2d(
          torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).groups(groups).bias(false)));
  const auto bn = torch::nn::BatchNorm2dOptions(out).eps(1e-3).momentum(0.03);
  if (sync)
    sync_bn_ = register_module("bn", parallel::SyncBatchNorm2d(bn, sync));
  else
    bn_ = register_module("bn", torch::nn::BatchNorm2d(bn));
}

at::Tensor ConvBNImpl::forward(const at::Tensor& x) {
  auto y = sync_bn_ ? sync_bn_(conv_(x)) : bn_(conv_(x));
  return act_ ? at::silu(y) : y;
}

BottleneckImpl::BottleneckImpl(int64_t c, bool shortcut, comm::Communicator* sync) : shortcut_(shortcut) {
  cv1_ = register_module("cv1", ConvBN(c, c, 3, 1, 1, true, sync));
  cv2_ = register_module("cv2", ConvBN(c, c, 3, 1, 1, true, sync));
}

at::Tensor BottleneckImpl::forward(const at::Tensor& x) {
  auto y = cv2_(cv1_(x));
  return shortcut_ ? x + y : y;
}

C2fImpl::C2fImpl(int64_t in, int64_t out, int64_t n, bool shortcut, double e, comm::Communicator* sync)
    : hidden_(int64_t(double(out) * e)) {
  if (hidden_ < 1) throw std::invalid_argument("yolo: C2f hidden width int(" + std::to_string(out) + " * e) is 0");
  cv1_ = register_module("cv1", ConvBN(in, 2 * hidden_, 1, 1, 1, true, sync));
  m_ = register_module("m", torch::nn::ModuleList());
  for (int64_t i = 0; i < n; ++i) m_->push_back(Bottleneck(hidden_, shortcut, sync));
  cv2_ = register_module("cv2", ConvBN((2 + n) * hidden_, out, 1, 1, 1, true, sync));
}

at::Tensor C2fImpl::forward(const at::Tensor& x) {
  std::vector<at::Tensor> pieces = cv1_(x).chunk(2, 1);
  for (const auto& m : *m_) pieces.push_back(m->as<Bottleneck>()->forward(pieces.back()));
  return cv2_(at::cat(pieces, 1));
}

AreaAttentionImpl::AreaAttentionImpl(int64_t dim, int64_t heads, int64_t areas, comm::Communicator* sync)
    : dim_(dim), heads_(heads), areas_(areas) {
  if (heads < 1 || dim % heads != 0)
    throw std::invalid_argument("yolo: attention heads " + std::to_string(heads) + " do not divide " +
                                std::to_string(dim) + " channels");
  if (areas < 1) throw std::invalid_argument("yolo: areas must be at least 1");
  qkv_ = register_module("qkv", ConvBN(dim, 3 * dim, 1, 1, 1, /*act=*/false, sync));
  proj_ = register_module("proj", ConvBN(dim, dim, 1, 1, 1, /*act=*/false, sync));
  pe_ = register_module("pe", ConvBN(dim, dim, 7, 1, dim, /*act=*/false, sync));
}

at::Tensor AreaAttentionImpl::forward(const at::Tensor& x) {
  const int64_t b = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t a = areas_for(h), n = (h / a) * w, d = c / heads_;
  const auto qkv = qkv_(x);  // [B, 3C, H, W]
  // Channel = part * C + head * d + i; pixel = strip * n + token (row-major strips of H/a rows).
  const auto t = qkv.reshape({b, 3, heads_, d, a, n}).permute({0, 4, 1, 2, 5, 3}).reshape({b * a, 3, heads_, n, d});
  const auto q = t.select(1, 0), k = t.select(1, 1), v = t.select(1, 2);  // [B*a, heads, n, d]
  const auto scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(d));
  const auto attn = at::matmul(at::softmax(scores, -1, at::kFloat).to(v.scalar_type()), v);  // [B*a, heads, n, d]
  const auto out = attn.reshape({b, a, heads_, n, d}).permute({0, 2, 4, 1, 3}).reshape({b, c, h, w});
  return proj_(out + pe_(qkv.narrow(1, 2 * c, c)));
}

ABlockImpl::ABlockImpl(int64_t dim, int64_t heads, int64_t hidden, int64_t areas, comm::Communicator* sync) {
  attn_ = register_module("attn", AreaAttention(dim, heads, areas, sync));
  mlp1_ = register_module("mlp1", ConvBN(dim, hidden, 1, 1, 1, true, sync));
  mlp2_ = register_module("mlp2", ConvBN(hidden, dim, 1, 1, 1, /*act=*/false, sync));
}

at::Tensor ABlockImpl::forward(const at::Tensor& x) {
  const auto y = x + attn_(x);
  return y + mlp2_(mlp1_(y));
}

A2C2fImpl::A2C2fImpl(int64_t in, int64_t out, int64_t n, int64_t areas, double mlp_ratio, comm::Communicator* sync) {
  const int64_t c = out / 2, heads = heads_for(c), hidden = int64_t(double(c) * mlp_ratio);
  if (c < 1 || hidden < 1)
    throw std::invalid_argument("yolo: A2C2f with " + std::to_string(out) + " channels is too narrow");
  cv1_ = register_module("cv1", ConvBN(in, c, 1, 1, 1, true, sync));
  m_ = register_module("m", torch::nn::ModuleList());
  for (int64_t i = 0; i < n; ++i)
    m_->push_back(torch::nn::Sequential(ABlock(c, heads, hidden, areas, sync), ABlock(c, heads, hidden, areas, sync)));
  cv2_ = register_module("cv2", ConvBN((1 + n) * c, out, 1, 1, 1, true, sync));
  // A small residual scale (YOLOv12's layer scale) keeps the fresh attention stage near identity.
  if (in == out) gamma_ = register_parameter("gamma", at::full({out}, 0.01));
}

at::Tensor A2C2fImpl::forward(const at::Tensor& x) {
  std::vector<at::Tensor> pieces{cv1_(x)};
  for (const auto& m : *m_) pieces.push_back(m->as<torch::nn::Sequential>()->forward(pieces.back()));
  const auto y = cv2_(at::cat(pieces, 1));
  return gamma_.defined() ? x + gamma_.view({1, -1, 1, 1}) * y : y;
}

YoloImpl::YoloImpl(const YoloConfig& config, comm::Communicator* sync_comm)
    : config_(config), sync_(config.sync_bn ? sync_comm : nullptr) {
  const auto [field, problem] = invalid_field(config);
  if (!field.empty()) throw std::invalid_argument("yolo: " + field + " " + problem);
  const Plan p = make_plan(config);
  comm::Communicator* const s = sync_;
  stem_ = register_module("stem", ConvBN(3, p.stem, 3, 2, 1, true, s));
  down1_ = register_module("down1", ConvBN(p.stem, p.down1, 3, 2, 1, true, s));
  stage1_ = register_module("stage1", C2f(p.down1, p.stage1, p.n_backbone, true, 0.25, s));
  down2_ = register_module("down2", ConvBN(p.stage1, p.down2, 3, 2, 1, true, s));
  stage2_ = register_module("stage2", C2f(p.down2, p.p3, p.n_backbone, true, 0.25, s));
  down3_ = register_module("down3", ConvBN(p.p3, p.down3, 3, 2, 1, true, s));
  if (config.area_attention) {
    attn3_ = register_module("stage3", A2C2f(p.down3, p.p4, p.n_attn, config.areas, config.mlp_ratio, s));
  } else {
    plain3_ = register_module("stage3", C2f(p.down3, p.p4, p.n_attn, true, 0.5, s));
  }
  down4_ = register_module("down4", ConvBN(p.p4, p.down4, 3, 2, 1, true, s));
  if (config.area_attention) {
    attn4_ = register_module("stage4", A2C2f(p.down4, p.p5, p.n_attn, 1, config.mlp_ratio, s));
  } else {
    plain4_ = register_module("stage4", C2f(p.down4, p.p5, p.n_attn, true, 0.5, s));
  }
  top_down4_ = register_module("top_down4", C2f(p.p5 + p.p4, p.td4, p.n_neck, false, 0.5, s));
  top_down3_ = register_module("top_down3", C2f(p.td4 + p.p3, p.td3, p.n_neck, false, 0.5, s));
  down_n3_ = register_module("down_n3", ConvBN(p.td3, p.td3, 3, 2, 1, true, s));
  bottom_up4_ = register_module("bottom_up4", C2f(p.td3 + p.td4, p.bu4, p.n_neck, false, 0.5, s));
  down_n4_ = register_module("down_n4", ConvBN(p.bu4, p.bu4, 3, 2, 1, true, s));
  bottom_up5_ = register_module("bottom_up5", C2f(p.bu4 + p.p5, p.bu5, p.n_neck, false, 0.5, s));

  box_ = register_module("box", torch::nn::ModuleList());
  cls_ = register_module("cls", torch::nn::ModuleList());
  const int64_t level_channels[3] = {p.td3, p.bu4, p.bu5};
  for (int l = 0; l < 3; ++l) {
    const int64_t ch = level_channels[l];
    auto box_out = torch::nn::Conv2d(torch::nn::Conv2dOptions(p.box_hidden, 4 * config.reg_max, 1));
    auto cls_out = torch::nn::Conv2d(torch::nn::Conv2dOptions(p.cls_hidden, config.num_classes, 1));
    // YOLOv8's bias priors: box logits flat (1.0), class probability ~5 objects per 640x640 image.
    const double stride = double(yolo_strides()[size_t(l)]);
    {
      at::NoGradGuard no_grad;
      box_out->bias.fill_(1.0);
      cls_out->bias.fill_(std::log(5.0 / double(config.num_classes) / std::pow(640.0 / stride, 2)));
    }
    box_->push_back(torch::nn::Sequential(ConvBN(ch, p.box_hidden, 3, 1, 1, true, s),
                                          ConvBN(p.box_hidden, p.box_hidden, 3, 1, 1, true, s), box_out));
    cls_->push_back(torch::nn::Sequential(ConvBN(ch, ch, 3, 1, ch, true, s), ConvBN(ch, p.cls_hidden, 1, 1, 1, true, s),
                                          ConvBN(p.cls_hidden, p.cls_hidden, 3, 1, p.cls_hidden, true, s),
                                          ConvBN(p.cls_hidden, p.cls_hidden, 1, 1, 1, true, s), cls_out));
  }
}

std::vector<at::Tensor> YoloImpl::forward(const at::Tensor& images) {
  if (images.dim() != 4 || images.size(1) != 3)
    throw std::invalid_argument("yolo: expected images [B, 3, H, W], got " + std::to_string(images.dim()) +
                                " dimensions");
  if (images.size(2) % 32 != 0 || images.size(3) % 32 != 0 || images.size(2) == 0 || images.size(3) == 0)
    throw std::invalid_argument("yolo: image size " + std::to_string(images.size(2)) + "x" +
                                std::to_string(images.size(3)) + " is not a multiple of 32 (the largest stride)");
  const auto p3 = stage2_(down2_(stage1_(down1_(stem_(images)))));
  const auto x4 = down3_(p3);
  const auto p4 = attn3_ ? attn3_(x4) : plain3_(x4);
  const auto x5 = down4_(p4);
  const auto p5 = attn4_ ? attn4_(x5) : plain4_(x5);

  auto up = [](const at::Tensor& x) {
    const std::vector<int64_t> size{x.size(2) * 2, x.size(3) * 2};
    return at::upsample_nearest2d(x, at::IntArrayRef(size));
  };
  const auto td4 = top_down4_(at::cat({up(p5), p4}, 1));
  const auto n3 = top_down3_(at::cat({up(td4), p3}, 1));
  const auto n4 = bottom_up4_(at::cat({down_n3_(n3), td4}, 1));
  const auto n5 = bottom_up5_(at::cat({down_n4_(n4), p5}, 1));

  const at::Tensor features[3] = {n3, n4, n5};
  std::vector<at::Tensor> levels;
  for (size_t l = 0; l < 3; ++l) {
    const auto box = (*box_)[l]->as<torch::nn::Sequential>()->forward(features[l]);
    const auto cls = (*cls_)[l]->as<torch::nn::Sequential>()->forward(features[l]);
    levels.push_back(at::cat({box, cls}, 1));
  }
  return levels;
}

}  // namespace meridian::models
