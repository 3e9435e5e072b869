// The YOLO-style detector against closed forms and references computed another way: output shapes
// per level, the closed-form parameter count against the module's parameter numels (and its order
// over the n..x scales), config errors, area attention against a plain multi-head attention written
// here strip by strip (and its strip-locality), and the closed-form FLOPs against a count taken from
// the built module's convolution weights; model.sync_bn: the same parameter and buffer names with
// SyncBatchNorm2d, and on one rank (a one-rank communicator written here, whose reductions are the
// identity) the same outputs, gradients and running statistics as with BatchNorm2d, with one
// allreduce per normalisation in forward and one in backward.
#include "meridian/models/yolo.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <map>

#include "meridian/comm/communicator.h"
#include "meridian/core/config.h"

namespace models = meridian::models;
namespace comm = meridian::comm;

namespace {
// A communicator of one rank, in process (no MPI): every collective over one rank leaves the tensors
// as they are. Counts the allreduces.
class SoloCommunicator : public comm::Communicator {
 public:
  struct Done : comm::Work {
    void wait() override {}
    bool wait_for(std::chrono::duration<double>) override { return true; }
    bool is_completed() override { return true; }
    std::chrono::steady_clock::time_point completed_at() override { return std::chrono::steady_clock::now(); }
  };
  int rank() const override { return 0; }
  int size() const override { return 1; }
  comm::Backend backend() const override { return comm::Backend::MPI; }
  comm::WorkPtr allreduce_async(at::Tensor&, comm::ReduceOp) override {
    ++allreduces;
    return std::make_shared<Done>();
  }
  comm::WorkPtr broadcast_async(at::Tensor&, int) override { return std::make_shared<Done>(); }
  comm::WorkPtr allgather_async(const at::Tensor& in, at::Tensor& out) override {
    out.copy_(in.reshape(out.sizes()));
    return std::make_shared<Done>();
  }
  comm::WorkPtr reduce_scatter_async(const at::Tensor& in, at::Tensor& out, comm::ReduceOp) override {
    out.copy_(in.reshape(out.sizes()));
    return std::make_shared<Done>();
  }
  comm::WorkPtr barrier_async() override { return std::make_shared<Done>(); }
  int allreduces = 0;
};

// Normalisation modules of each kind in a model.
std::pair<int, int> norm_counts(torch::nn::Module& m) {
  int plain = 0, sync = 0;
  for (const auto& item : m.named_modules()) {
    plain += item.value()->as<torch::nn::BatchNorm2d>() != nullptr;
    sync += item.value()->as<meridian::parallel::SyncBatchNorm2d>() != nullptr;
  }
  return {plain, sync};
}

std::vector<std::string> keys(const torch::OrderedDict<std::string, at::Tensor>& d) {
  std::vector<std::string> v;
  for (const auto& item : d) v.push_back(item.key() + " " + c10::str(item.value().sizes()));
  return v;
}

models::YoloConfig scale(const std::string& name, int64_t classes = 80) {
  return models::YoloConfig::from_config(meridian::Config::parse(
      "model:\n  scale: " + name + "\n  num_classes: " + std::to_string(classes) + "\n", "test.yaml"));
}
int64_t yolo_parameters(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}
// The field of the ConfigError that parsing `yaml` throws ("" when none).
std::string error_field(const std::string& yaml) {
  try {
    models::YoloConfig::from_config(meridian::Config::parse(yaml, "bad.yaml"));
  } catch (const meridian::ConfigError& e) {
    EXPECT_EQ(e.origin().rfind("bad.yaml", 0), 0u) << e.origin();  // "bad.yaml" or "bad.yaml line N"
    return e.field();
  }
  return "";
}

// Multi-head softmax attention computed strip by strip with plain loops over heads and strips,
// from the module's own qkv / pe / proj layers: out = proj(attn + pe(v)).
at::Tensor reference_attention(models::AreaAttention& m, const at::Tensor& x, int64_t strips) {
  const int64_t b = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3), heads = m->heads(), d = c / heads;
  const auto qkv = m->qkv()->forward(x);
  auto out = at::zeros_like(x);
  for (int64_t s = 0; s < strips; ++s) {
    const int64_t rows = h / strips;
    const auto part = qkv.narrow(2, s * rows, rows).reshape({b, 3 * c, rows * w});  // [B, 3C, n]
    for (int64_t head = 0; head < heads; ++head) {
      const auto q = part.narrow(1, head * d, d).transpose(1, 2);  // [B, n, d]
      const auto k = part.narrow(1, c + head * d, d).transpose(1, 2);
      const auto v = part.narrow(1, 2 * c + head * d, d).transpose(1, 2);
      const auto p = at::softmax(at::bmm(q, k.transpose(1, 2)) / std::sqrt(double(d)), -1);
      out.narrow(2, s * rows, rows)
          .narrow(1, head * d, d)
          .copy_(at::bmm(p, v).transpose(1, 2).reshape({b, d, rows, w}));
    }
  }
  return m->proj()->forward(out + m->pe()->forward(qkv.narrow(1, 2 * c, c)));
}
}  // namespace

TEST(Yolo, OutputShapesPerLevel) {
  torch::manual_seed(0);
  models::Yolo model(scale("n", 5));
  for (int64_t s : {64, 128}) {
    const auto levels = model->forward(torch::rand({2, 3, s, s}));
    ASSERT_EQ(levels.size(), 3u);
    for (size_t l = 0; l < 3; ++l) {
      const int64_t stride = models::yolo_strides()[l];
      EXPECT_EQ(levels[l].sizes(), (at::IntArrayRef{2, 4 * 16 + 5, s / stride, s / stride}))
          << "size " << s << " level " << l;
      EXPECT_TRUE(levels[l].isfinite().all().item<bool>());
    }
  }
  EXPECT_THROW(model->forward(torch::rand({1, 3, 80, 64})), std::invalid_argument);
  EXPECT_THROW(model->forward(torch::rand({1, 1, 64, 64})), std::invalid_argument);
  // The head's bias priors (YOLOv8): box 1.0, class log(5 / nc / (640 / stride)^2).
  const auto params = model->named_parameters();
  EXPECT_FLOAT_EQ(params["box.0.2.bias"][0].item<float>(), 1.0f);
  EXPECT_NEAR(params["cls.2.4.bias"][3].item<double>(), std::log(5.0 / 5.0 / std::pow(640.0 / 32.0, 2)), 1e-5);
}

TEST(Yolo, ParameterCountIsTheModuleSizeAndGrowsWithScale) {
  int64_t previous = 0;
  for (const char* name : {"n", "s", "m", "l", "x"}) {
    const auto c = scale(name);
    torch::manual_seed(0);
    models::Yolo model(c);
    EXPECT_EQ(yolo_parameters(*model), c.parameter_count()) << name;
    EXPECT_GT(c.parameter_count(), previous) << name;
    previous = c.parameter_count();
    std::cout << "[ yolo " << name << " ] params " << c.parameter_count() << ", " << c.flops(640) / 1e9
              << " GFLOPs at 640\n";
  }
  // Without area attention, and with a tiny width (channels clamp to 8), the closed form still holds.
  auto plain = scale("n", 3);
  plain.area_attention = false;
  plain.width = 0.05;
  models::Yolo small(plain);
  EXPECT_EQ(yolo_parameters(*small), plain.parameter_count());
}

TEST(Yolo, ConfigPresetsOverridesAndErrors) {
  const auto m = models::YoloConfig::from_config(
      meridian::Config::parse("model:\n  scale: m\n  width: 0.3\n  num_classes: 7\n", "ok.yaml"));
  EXPECT_DOUBLE_EQ(m.width, 0.3);  // explicit width overrides the preset
  EXPECT_DOUBLE_EQ(m.depth, 0.5);
  EXPECT_EQ(m.max_channels, 512);
  EXPECT_EQ(m.num_classes, 7);
  EXPECT_EQ(scale("x").width, 1.5);
  EXPECT_EQ(scale("l").depth, 1.0);
  EXPECT_EQ(m.channels(1024), 160);  // min(1024, 512) * 0.3 = 153.6 -> 160 (multiple of 8)
  EXPECT_EQ(m.repeats(4), 2);

  EXPECT_EQ(error_field("model:\n  scale: q\n"), "model.scale");
  EXPECT_EQ(error_field("model:\n  width: -1\n"), "model.width");
  EXPECT_EQ(error_field("model:\n  depth: 0\n"), "model.depth");
  EXPECT_EQ(error_field("model:\n  num_classes: 0\n"), "model.num_classes");
  EXPECT_EQ(error_field("model:\n  reg_max: 1\n"), "model.reg_max");
  EXPECT_EQ(error_field("model:\n  areas: 0\n"), "model.areas");
  EXPECT_EQ(error_field("model:\n  max_channels: 4\n"), "model.max_channels");
  EXPECT_EQ(error_field("model:\n  area_attention: maybe\n"), "model.area_attention");
  EXPECT_EQ(error_field("model:\n  scale: n\n"), "");
  auto bad = scale("n");
  bad.num_classes = 0;
  EXPECT_THROW(models::Yolo{bad}, std::invalid_argument);
}

TEST(Yolo, AreaAttentionEqualsPlainAttentionWithinStrips) {
  torch::manual_seed(3);
  for (int64_t areas : {1, 2, 4, 3}) {
    models::AreaAttention attn(64, 2, areas);
    attn->eval();  // BatchNorm on running statistics, so the reference sees the same layers
    const auto x = torch::randn({2, 64, 8, 6});
    // 3 does not divide 8 rows: one area (global attention).
    const int64_t strips = (8 % areas == 0) ? areas : 1;
    EXPECT_EQ(attn->areas_for(8), strips);
    const auto got = attn->forward(x), want = reference_attention(attn, x, strips);
    EXPECT_TRUE(torch::allclose(got, want, 1e-4, 1e-5))
        << "areas " << areas << " max diff " << (got - want).abs().max().item<double>();
  }
  // Areas are real restrictions: 2 strips differ from global attention.
  models::AreaAttention attn(64, 2, 2);
  attn->eval();
  const auto x = torch::randn({1, 64, 8, 6});
  EXPECT_FALSE(torch::allclose(attn->forward(x), reference_attention(attn, x, 1), 1e-4, 1e-5));
}

TEST(Yolo, AreaAttentionIsLocalToItsStrip) {
  torch::manual_seed(4);
  // 16 rows, 2 strips of 8. A change at row 0 reaches rows 0..3 through the 7x7 positional conv and
  // strip 0 through attention; strip 1 (rows 8..15) must not change. With one area it does.
  for (int64_t areas : {2, 1}) {
    models::AreaAttention attn(32, 1, areas);
    attn->eval();
    auto x = torch::randn({1, 32, 16, 8});
    auto changed = x.clone();
    changed.select(2, 0).select(2, 5).add_(3.0);
    const auto a = attn->forward(x), b = attn->forward(changed);
    const bool strip1_same = torch::allclose(a.narrow(2, 8, 8), b.narrow(2, 8, 8), 1e-5, 1e-6);
    EXPECT_EQ(strip1_same, areas == 2) << "areas " << areas;
    EXPECT_FALSE(torch::allclose(a.narrow(2, 4, 4), b.narrow(2, 4, 4), 1e-5, 1e-6));  // attention within strip 0
  }
}

TEST(Yolo, FlopsMatchACountFromTheModuleWeights) {
  // Input stride of every top-level block (head levels by their index): a convolution's output
  // has (S / (input stride * conv stride))^2 pixels and costs 2 * weight.numel() per pixel.
  const std::map<std::string, int64_t> input_stride{
      {"stem", 1},      {"down1", 2},   {"stage1", 4},      {"down2", 4},    {"stage2", 8},
      {"down3", 8},     {"stage3", 16}, {"down4", 16},      {"stage4", 32},  {"top_down4", 16},
      {"top_down3", 8}, {"down_n3", 8}, {"bottom_up4", 16}, {"down_n4", 16}, {"bottom_up5", 32}};
  for (bool area_attention : {true, false}) {
    auto c = scale("n", 5);
    c.area_attention = area_attention;
    models::Yolo model(c);
    for (int64_t s : {64, 640}) {
      double counted = 0;
      int convs = 0;
      for (const auto& item : model->named_modules("", /*include_self=*/false)) {
        const std::string& name = item.key();
        const std::string top = name.substr(0, name.find('.'));
        int64_t in_stride = 0;
        if (top == "box" || top == "cls") {
          if (name == top) continue;  // the ModuleList itself
          const auto rest = name.substr(top.size() + 1);
          in_stride = models::yolo_strides().at(std::stoul(rest.substr(0, rest.find('.'))));
        } else {
          ASSERT_TRUE(input_stride.count(top)) << name;
          in_stride = input_stride.at(top);
        }
        if (auto* conv = item.value()->as<torch::nn::Conv2d>()) {
          const int64_t out = s / (in_stride * (*conv->options.stride())[0]);
          counted += 2.0 * double(conv->weight.numel()) * double(out * out);
          ++convs;
        } else if (auto* attn = item.value()->as<models::AreaAttention>()) {
          const int64_t side = s / in_stride, n = side * side;
          const int64_t dim = model->named_parameters()[name + ".qkv.conv.weight"].size(1);
          counted += 4.0 * double(n) * double(n / attn->areas_for(side)) * double(dim);  // q k^T, attn v
        }
      }
      EXPECT_GT(convs, 50);
      EXPECT_NEAR(model->flops(s) / counted, 1.0, 1e-12) << "size " << s << " attention " << area_attention;
    }
  }
  EXPECT_THROW(scale("n").flops(100), std::invalid_argument);
}

// Timing, not a check (run with --gtest_also_run_disabled_tests): forward + backward of scale n,
// 256 px, batch 8.
TEST(Yolo, DISABLED_TimeForwardBackward) {
  torch::manual_seed(0);
  models::Yolo model(scale("n", 80));
  const auto images = torch::rand({8, 3, 256, 256});
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    at::Tensor loss = at::zeros({});
    for (const auto& l : model->forward(images)) loss = loss + l.square().mean();
    loss.backward();
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << "[ yolo n ] forward+backward 8x3x256x256: " << sec << " s (" << at::get_num_threads() << " threads)\n";
  }
}

TEST(Yolo, SyncBatchNormKeepsNamesAndEqualsBatchNormOnOneRank) {
  const auto c = models::YoloConfig::from_config(
      meridian::Config::parse("model:\n  scale: n\n  num_classes: 3\n  sync_bn: true\n", "sync.yaml"));
  ASSERT_TRUE(c.sync_bn);
  EXPECT_FALSE(scale("n").sync_bn);  // off by default
  auto plain_config = c;
  plain_config.sync_bn = false;
  SoloCommunicator solo;
  torch::manual_seed(11);
  models::Yolo plain(plain_config, &solo);  // sync_bn off: the communicator is ignored
  models::Yolo sync(c, &solo);
  models::Yolo no_comm(c);  // sync_bn on without a communicator: plain BatchNorm2d
  const auto [plain_bn, plain_sync] = norm_counts(*plain);
  EXPECT_GT(plain_bn, 50);
  EXPECT_EQ(plain_sync, 0);
  EXPECT_EQ(norm_counts(*sync), std::make_pair(0, plain_bn));
  EXPECT_EQ(norm_counts(*no_comm), std::make_pair(plain_bn, 0));
  EXPECT_TRUE(sync->synchronised_bn());
  EXPECT_FALSE(plain->synchronised_bn());
  EXPECT_FALSE(no_comm->synchronised_bn());
  // Names (in order) and shapes identical: a checkpoint of one loads into the other.
  EXPECT_EQ(keys(sync->named_parameters()), keys(plain->named_parameters()));
  EXPECT_EQ(keys(sync->named_buffers()), keys(plain->named_buffers()));

  // One rank: the same network as BatchNorm2d, in training mode.
  {
    at::NoGradGuard no_grad;
    const auto params = plain->named_parameters();
    for (auto& p : sync->named_parameters()) p.value().copy_(params[p.key()]);
  }
  const auto images = torch::rand({2, 3, 64, 64});
  const auto forward_backward = [&](models::Yolo& m) {
    const auto levels = m->forward(images);
    at::Tensor loss = at::zeros({});
    for (size_t l = 0; l < levels.size(); ++l) loss = loss + (levels[l] * levels[l].detach().sin()).mean();
    loss.backward();
    return levels;
  };
  const auto want = forward_backward(plain);
  const auto got = forward_backward(sync);
  EXPECT_EQ(solo.allreduces, 2 * plain_bn);  // statistics in forward, gradient sums in backward
  for (size_t l = 0; l < 3; ++l)
    EXPECT_TRUE(torch::allclose(got[l], want[l], 1e-3, 1e-4))
        << "level " << l << " max diff " << (got[l] - want[l]).abs().max().item<double>();
  const auto plain_params = plain->named_parameters();
  for (const auto& p : sync->named_parameters()) {
    const auto& ref = plain_params[p.key()].grad();
    const double scale_of = ref.abs().max().item<double>();
    EXPECT_TRUE(torch::allclose(p.value().grad(), ref, 1e-2, 1e-3 * scale_of + 1e-7))
        << p.key() << " max diff " << (p.value().grad() - ref).abs().max().item<double>() << " of " << scale_of;
  }
  const auto plain_buffers = plain->named_buffers();
  for (const auto& b : sync->named_buffers())
    EXPECT_TRUE(torch::allclose(b.value().to(at::kDouble), plain_buffers[b.key()].to(at::kDouble), 1e-4, 1e-5))
        << b.key();
}
