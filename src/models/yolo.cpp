// YoloImpl: a model YAML's rows built into Ultralytics' modules (yolo_modules.h) as Ultralytics'
// parse_model builds them, the forward pass over that graph, its FLOPs, and loading Ultralytics' weights.
#include "meridian/models/yolo.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include "meridian/core/error.h"
#include "meridian/models/safetensors.h"
#include "yolo_modules.h"

namespace meridian::models {

namespace {

enum Kind { kPlain = 0, kConcat = 1, kDetect = 2 };

// The largest stride a row may reach: an input is a multiple of it (no image is 65,536 px a side),
// and beyond, enough strided rows overflow the stride to 0 (then forward and flops divided by it).
constexpr int64_t kMaxStride = int64_t{1} << 16;

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
  std::string building;  // the row being built, for a failed allocation's message
  try {
    for (int64_t i = 0; i < rows; ++i) {
      const YoloLayerSpec& row = spec.layers[size_t(i)];
      building = row.field + " (" + row.module + ")";
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
        for (int64_t k = 0; k < n; ++k) {  // each repeat strides again
          if (out_stride > kMaxStride / s)
            fail("strides by " + std::to_string(s) + (n > 1 ? " in each of " + std::to_string(n) + " repeats" : "") +
                 " after stride " + std::to_string(stride_of(from[0])) + ": past stride " + std::to_string(kMaxStride) +
                 " the input shrinks to nothing (no image is that large)");
          out_stride *= s;
        }
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
  } catch (const c10::Error& e) {  // the widths the YAML asks for do not fit in memory
    throw ConfigError(src, building, std::string("cannot build the layer: ") + e.what_without_backtrace());
  }
  if (kinds_.empty() || kinds_.back() != kDetect)
    throw ConfigError(src, "head", "the last row must be Detect (meridian trains detection models)");
  keep_.assign(size_t(rows), false);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j : from_[size_t(i)])
      if (j >= 0 && j != i - 1) keep_[size_t(j)] = true;
}

std::vector<at::Tensor> YoloImpl::forward(const at::Tensor& images) {
  const int64_t max_stride = this->max_stride();
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
  const int64_t max_stride = this->max_stride();
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
