// The Ultralytics YOLO models (yolov8, yolo11, yolo12 built from their model YAMLs) against the real
// ultralytics package (tests/models/ultralytics_yolo.py, one Python process for the whole file): the
// parameter counts Ultralytics publishes; the state_dict names and shapes (buffers included) and the
// parameter counts of the DetectionModels Ultralytics builds from its own yolov8n.yaml, yolo11n.yaml
// and yolo12n.yaml equal meridian's; the raw head outputs of Ultralytics' DetectionModel (random
// weights and BatchNorm statistics, loaded here by name) equal meridian's forward, to 1e-3 of the
// outputs in float32 and 1e-12 in float64; FLOPs against Ultralytics' published GFLOPs; weight files
// with missing, unknown and misshapen tensors and another class count; model.yaml / model.scale
// resolution and the errors that name the YAML and its row; model.sync_bn: the same parameter and
// buffer names with SyncBatchNorm2d, and on one rank (a one-rank communicator written here, whose
// reductions are the identity) the same outputs, gradients and running statistics as with
// BatchNorm2d, with one allreduce per normalisation each way.
#include "meridian/models/yolo.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "meridian/comm/communicator.h"
#include "meridian/core/config.h"
#include "meridian/core/error.h"
#include "meridian/models/safetensors.h"
#include "meridian/parallel/sync_bn.h"

namespace models = meridian::models;
namespace comm = meridian::comm;
namespace fs = std::filesystem;

namespace {
// A communicator of one rank, in process (no MPI): every collective over one rank leaves the tensors
// as they are. Counts the allreduces.
class SoloCommunicator : public comm::Communicator {
 public:
  struct Done : comm::Work {
    void wait() override {}
    void synchronize() override {}
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

models::YoloConfig parse(const std::string& yaml, const std::string& origin = "test.yaml") {
  return models::YoloConfig::from_config(meridian::Config::parse(yaml, origin));
}
int64_t parameter_count(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}
// The field of the ConfigError that `f` throws ("" when none).
template <class F>
std::string error_field(F f, std::string* origin = nullptr) {
  try {
    f();
  } catch (const meridian::ConfigError& e) {
    if (origin) *origin = e.origin();
    return e.field();
  }
  return "";
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("meridian_yolo_" + std::to_string(::getpid()) + "_" +
                                        std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

const std::string kSource = MERIDIAN_SOURCE_DIR;
std::string yaml_file(const std::string& family) { return kSource + "/jobs/configs/ultralytics/" + family + ".yaml"; }

// Ultralytics' models for this file, made once by one `ultralytics_yolo.py make` (each a directory
// with model.safetensors, io.safetensors and info.json; see that script): built from Ultralytics' own
// model YAMLs (yolo11n.yaml: its yolo11.yaml at scale n) with random weights.
struct Reference {
  std::string family, scale;
  int64_t nc;
  int seed, size;
  double width = 0;  // 0: the scale's; else a narrower model of the scale (cheaper, the same modules)
  std::string name() const {
    return family + scale + "_nc" + std::to_string(nc) + "_" + std::to_string(size) + (width > 0 ? "_narrow" : "");
  }
  models::YoloConfig config() const {
    auto c = models::YoloConfig::builtin(family, scale, nc);
    if (width > 0) c.width = width;
    return c;
  }
};
const std::vector<Reference> kReferences{
    // HeadOutputs: YOLOv8's class branch, C2f; C3k2, C3k, C2PSA, DWConv branch; C3k2's C3k forced at
    // m; A2C2f with 4 areas; residual A2C2f, mlp_ratio 1.2 and depth 1 at l. m and l at width 0.25
    // (the scale's letter still decides C3k and A2C2f's options; 20-26M parameters cost a minute here).
    {"yolov8", "n", 3, 11, 64},
    {"yolo11", "n", 5, 11, 64},
    {"yolo11", "m", 2, 11, 64, 0.25},
    {"yolo12", "n", 4, 11, 64},
    {"yolo12", "l", 7, 11, 64, 0.25},
    // Names, shapes and counts at nc 80 (yolo11n also for the weight-file cases).
    {"yolov8", "n", 80, 3, 32},
    {"yolo11", "n", 80, 3, 32},
    {"yolo12", "n", 80, 3, 32}};

// The directory of one reference (made on first use, all together); "" when the script failed.
fs::path reference(const Reference& r) {
  static TempDir dir;
  static const bool made = [] {
    std::string cmd = std::string(MERIDIAN_PYTHON) + " " + kSource + "/tests/models/ultralytics_yolo.py make";
    for (const auto& k : kReferences)
      cmd += " --case " + (dir.path / k.name()).string() + ":" + k.family + k.scale + ".yaml::" + std::to_string(k.nc) +
             ":" + std::to_string(k.seed) + ":" + std::to_string(k.size) +
             (k.width > 0 ? ":" + std::to_string(k.width) : "");
    const int rc = std::system(cmd.c_str());
    EXPECT_EQ(rc, 0) << cmd;
    return rc == 0;
  }();
  return made ? dir.path / r.name() : fs::path();
}

nlohmann::json read_json(const fs::path& file) {
  std::ifstream in(file);
  return nlohmann::json::parse(in);
}

std::map<std::string, at::Tensor> read_all(const fs::path& file) {
  std::map<std::string, at::Tensor> m;
  for (auto& [name, t] : models::load_safetensors(file.string())) m[name] = t;
  return m;
}
}  // namespace

// Ultralytics' model.info() for nc 80, as its YAMLs' summaries say (ultralytics 8.4 builds exactly
// these; the scales Ultralytics builds here are checked in UltralyticsBuildsTheSameModels below).
TEST(Yolo, PublishedParameterCounts) {
  const std::map<std::string, int64_t> published{
      {"yolov8n", 3157200}, {"yolov8s", 11166560}, {"yolov8m", 25902640}, {"yolov8l", 43691520}, {"yolov8x", 68229648},
      {"yolo11n", 2624080}, {"yolo11s", 9458752},  {"yolo11m", 20114688}, {"yolo11l", 25372160}, {"yolo11x", 56966176},
      {"yolo12n", 2602288}, {"yolo12s", 9284096},  {"yolo12m", 20199168}, {"yolo12l", 26450784}, {"yolo12x", 59210784}};
  for (const auto& [name, count] : published) {
    const auto c = parse("model:\n  yaml: " + name + ".yaml\n");
    EXPECT_EQ(c.scale, name.substr(name.size() - 1)) << name;
    models::Yolo model(c);
    EXPECT_EQ(parameter_count(*model), count) << name;
  }
  // Ultralytics' state_dict names, buffers included.
  models::Yolo v8(models::YoloConfig::builtin("yolov8", "n", 80));
  const auto params = v8->named_parameters();
  const auto buffers = v8->named_buffers();
  for (const char* name :
       {"model.0.conv.weight", "model.0.bn.weight", "model.2.m.0.cv1.conv.weight", "model.9.cv2.conv.weight",
        "model.22.cv2.0.0.conv.weight", "model.22.cv3.2.2.bias", "model.22.dfl.conv.weight"})
    EXPECT_TRUE(params.contains(name)) << name;
  EXPECT_TRUE(buffers.contains("model.0.bn.running_mean"));
  EXPECT_TRUE(buffers.contains("model.21.cv2.bn.num_batches_tracked"));
  EXPECT_EQ(v8->detect_index(), 22);
  EXPECT_FALSE(params["model.22.dfl.conv.weight"].requires_grad());  // fixed 0..15, as Ultralytics'
  EXPECT_TRUE(torch::equal(params["model.22.dfl.conv.weight"].flatten(), torch::arange(16, torch::kFloat)));
  models::Yolo v11(models::YoloConfig::builtin("yolo11", "n", 80));
  EXPECT_TRUE(v11->named_parameters().contains("model.23.cv3.0.0.0.conv.weight"));     // DWConv class branch
  EXPECT_TRUE(v11->named_parameters().contains("model.10.m.0.attn.qkv.conv.weight"));  // C2PSA
  models::Yolo v12(models::YoloConfig::builtin("yolo12", "l", 80));
  EXPECT_TRUE(v12->named_parameters().contains("model.6.gamma"));  // residual A2C2f at l
  EXPECT_TRUE(v12->named_parameters().contains("model.6.m.0.1.attn.pe.conv.weight"));
}

TEST(Yolo, OutputsStridesAndBiasPriors) {
  torch::manual_seed(0);
  models::Yolo model(models::YoloConfig::builtin("yolo11", "n", 5));
  EXPECT_EQ(model->strides(), (std::vector<int64_t>{8, 16, 32}));
  for (int64_t s : {64, 96}) {
    const auto levels = model->forward(torch::rand({2, 3, s, s}));
    ASSERT_EQ(levels.size(), 3u);
    for (size_t l = 0; l < 3; ++l)
      EXPECT_EQ(levels[l].sizes(), (at::IntArrayRef{2, 4 * 16 + 5, s / model->strides()[l], s / model->strides()[l]}));
  }
  EXPECT_THROW(model->forward(torch::rand({1, 3, 80, 64})), std::invalid_argument);
  EXPECT_THROW(model->forward(torch::rand({1, 1, 64, 64})), std::invalid_argument);
  // Detect.bias_init: box 2.0, class log(5 / nc / (640 / stride)^2) (Ultralytics' own values are
  // checked in UltralyticsBuildsTheSameModels).
  const auto params = model->named_parameters();
  EXPECT_FLOAT_EQ(params["model.23.cv2.0.2.bias"][0].item<float>(), 2.0f);
  EXPECT_NEAR(params["model.23.cv3.2.2.bias"][3].item<double>(), std::log(5.0 / 5.0 / std::pow(640.0 / 32.0, 2)), 1e-5);
}

// The DetectionModels Ultralytics builds from its yolov8n.yaml, yolo11n.yaml and yolo12n.yaml (and
// the other references' scales and class counts): every state_dict tensor's name and shape, buffers
// included, is meridian's, the parameter counts are equal, and so are Detect.bias_init's values.
TEST(Yolo, UltralyticsBuildsTheSameModels) {
  for (const auto& r : kReferences) {
    SCOPED_TRACE(r.name());
    const fs::path dir = reference(r);
    ASSERT_FALSE(dir.empty());
    std::map<std::string, std::vector<int64_t>> theirs, ours;
    for (const auto& [name, t] : read_all(dir / "model.safetensors")) theirs[name] = t.sizes().vec();
    models::Yolo model(r.config());
    for (const auto& p : model->named_parameters()) ours[p.key()] = p.value().sizes().vec();
    for (const auto& b : model->named_buffers()) ours[b.key()] = b.value().sizes().vec();
    for (const auto& [name, shape] : theirs) {
      const auto it = ours.find(name);
      if (it == ours.end())
        ADD_FAILURE() << "Ultralytics' " << name << " " << c10::str(at::IntArrayRef(shape)) << " is not meridian's";
      else
        EXPECT_EQ(it->second, shape) << name;
    }
    for (const auto& [name, shape] : ours)
      EXPECT_TRUE(theirs.count(name)) << "meridian's " << name << " is not Ultralytics'";
    const auto info = read_json(dir / "info.json");
    const int64_t count = info["parameters"].get<int64_t>();
    // Detect.bias_init as Ultralytics builds it: the last convolution of each level's box and class branch.
    const auto params = model->named_parameters();
    const std::string head = "model." + std::to_string(model->detect_index());
    for (size_t l = 0; l < 3; ++l) {
      const auto box = params[head + ".cv2." + std::to_string(l) + ".2.bias"];
      const auto cls = params[head + ".cv3." + std::to_string(l) + ".2.bias"];
      EXPECT_TRUE(torch::allclose(box, at::full_like(box, info["bias_init"]["box"][l].get<double>()))) << "level " << l;
      EXPECT_TRUE(torch::allclose(cls, at::full_like(cls, info["bias_init"]["cls"][l].get<double>()))) << "level " << l;
    }
    std::cout << "[ " << r.name() << " ] " << theirs.size() << " tensors; parameters: Ultralytics " << count
              << ", meridian " << parameter_count(*model) << "\n";
    EXPECT_EQ(parameter_count(*model), count);
    EXPECT_EQ(theirs.size(), ours.size());
  }
}

// The raw head outputs of Ultralytics' DetectionModel with random weights, loaded by name.
TEST(Yolo, HeadOutputsEqualUltralytics) {
  for (const auto& k : kReferences) {
    if (k.size != 64) continue;
    SCOPED_TRACE(k.name());
    const fs::path dir = reference(k);
    ASSERT_FALSE(dir.empty());
    models::Yolo model(k.config());
    EXPECT_TRUE(models::load_ultralytics_weights(*model, (dir / "model.safetensors").string()).empty());
    model->eval();
    const auto io = read_all(dir / "io.safetensors");
    at::NoGradGuard no_grad;
    // float32, as trained: within a float32 forward's summation-order differences over a deep model
    // (relative to the outputs); float64: the same semantics to rounding.
    const auto levels = model->forward(io.at("input"));
    model->to(torch::kDouble);
    const auto levels64 = model->forward(io.at("input").to(torch::kDouble));
    ASSERT_EQ(levels.size(), 3u);
    ASSERT_EQ(levels64.size(), 3u);
    for (size_t l = 0; l < 3; ++l) {
      const auto& want = io.at("out." + std::to_string(l));
      const auto& want64 = io.at("out64." + std::to_string(l));
      ASSERT_EQ(levels[l].sizes(), want.sizes()) << "level " << l;
      const double scale = std::max(1.0, want64.abs().max().item<double>());
      const double diff = (levels[l] - want).abs().max().item<double>();
      const double diff64 = (levels64[l] - want64).abs().max().item<double>();
      std::cout << "[ " << k.name() << " ] level " << l << ": max |meridian - Ultralytics| " << diff << " in float32, "
                << diff64 << " in float64 (outputs up to " << scale << ")\n";
      EXPECT_LE(diff, 1e-3 * scale) << "level " << l;
      EXPECT_LE(diff64, 1e-12 * scale) << "level " << l;
    }
  }
}

// Another class count: the class head's tensors of another shape keep their initialisation (and are
// named); everything else loads. Bad files are named with the tensor.
TEST(Yolo, WeightFilesWithOtherClassesAndBadTensors) {
  TempDir dir;  // the bad files
  const fs::path made = reference({"yolo11", "n", 80, 3, 32});
  ASSERT_FALSE(made.empty());
  const std::string file = (made / "model.safetensors").string();
  torch::manual_seed(1);
  models::Yolo model(models::YoloConfig::builtin("yolo11", "n", 5));
  const auto before = model->named_parameters()["model.23.cv3.1.2.weight"].clone();
  const auto kept = models::load_ultralytics_weights(*model, file);
  // nc 5: c3 = max(64, min(5, 100)) = 64 instead of 80, so the 1x1 Conv and everything after it in
  // each class branch change shape (weights, BatchNorm weight, bias, statistics); the DWConvs load.
  EXPECT_FALSE(kept.empty());
  for (const auto& name : kept) EXPECT_EQ(name.rfind("model.23.cv3.", 0), 0u) << name;
  EXPECT_TRUE(std::find(kept.begin(), kept.end(), "model.23.cv3.1.2.weight") != kept.end());
  EXPECT_TRUE(std::find(kept.begin(), kept.end(), "model.23.cv3.0.0.0.conv.weight") == kept.end());
  const auto file_tensors = read_all(file);
  const auto params = model->named_parameters();
  EXPECT_TRUE(torch::equal(params["model.23.cv3.1.2.weight"], before));
  EXPECT_TRUE(
      torch::equal(params["model.23.cv3.0.0.0.conv.weight"], file_tensors.at("model.23.cv3.0.0.0.conv.weight")));
  EXPECT_TRUE(torch::equal(params["model.4.m.0.cv1.conv.weight"], file_tensors.at("model.4.m.0.cv1.conv.weight")));

  // Missing, unknown and misshapen tensors: DataError naming the file and each tensor, nothing copied.
  auto tensors = models::load_safetensors(file);
  auto rewrite = [&](auto change) {
    auto copy = tensors;
    change(copy);
    const std::string bad = (dir.path / "bad.safetensors").string();
    models::save_safetensors(bad, copy);
    models::Yolo fresh(models::YoloConfig::builtin("yolo11", "n", 80));
    const auto w0 = fresh->named_parameters()["model.0.conv.weight"].clone();
    try {
      models::load_ultralytics_weights(*fresh, bad);
    } catch (const meridian::DataError& e) {
      EXPECT_TRUE(torch::equal(fresh->named_parameters()["model.0.conv.weight"], w0));
      return std::string(e.what());
    }
    return std::string();
  };
  auto erase = [](models::NamedTensors& t, const std::string& name) {
    t.erase(std::remove_if(t.begin(), t.end(), [&](const auto& p) { return p.first == name; }), t.end());
  };
  std::string msg = rewrite([&](auto& t) { erase(t, "model.16.cv2.bn.running_var"); });
  EXPECT_NE(msg.find("bad.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.16.cv2.bn.running_var"), std::string::npos) << msg;
  msg = rewrite([&](auto& t) { t.emplace_back("model.24.extra.weight", torch::zeros({2})); });
  EXPECT_NE(msg.find("model.24.extra.weight"), std::string::npos) << msg;
  msg = rewrite([&](auto& t) {
    for (auto& [name, v] : t)
      if (name == "model.3.conv.weight") v = torch::zeros({8, 8, 3, 3});
  });
  EXPECT_NE(msg.find("model.3.conv.weight"), std::string::npos) << msg;
  // Not a safetensors file at all.
  std::ofstream(dir.path / "text.safetensors") << "not weights";
  models::Yolo fresh(models::YoloConfig::builtin("yolo11", "n", 80));
  EXPECT_THROW(models::load_ultralytics_weights(*fresh, (dir.path / "text.safetensors").string()), meridian::DataError);
}

TEST(Yolo, ModelYamlAndScaleResolution) {
  EXPECT_EQ(parse("model: {yaml: yolo12s.yaml}\n").scale, "s");
  const auto x = parse("model: {yaml: yolov8.yaml, scale: x}\n");
  EXPECT_EQ(x.scale, "x");
  EXPECT_DOUBLE_EQ(x.width, 1.25);
  EXPECT_EQ(x.max_channels, 512);
  EXPECT_EQ(x.num_classes, 80);                              // the YAML's nc
  const auto first = parse("model: {yaml: yolo11.yaml}\n");  // no letter: the first scale, n
  EXPECT_EQ(first.scale, "n");
  EXPECT_DOUBLE_EQ(first.depth, 0.5);
  const auto over = parse("model: {yaml: yolo11m.yaml, width: 0.3, num_classes: 7}\n");
  EXPECT_DOUBLE_EQ(over.width, 0.3);  // explicit multiples override the scale's
  EXPECT_DOUBLE_EQ(over.depth, 0.5);
  EXPECT_EQ(over.num_classes, 7);
  // A file, also by its name with a scale letter (Ultralytics' unified path).
  TempDir dir;
  fs::copy_file(yaml_file("yolov8"), dir.path / "custom.yaml");
  fs::copy_file(yaml_file("yolo11"), dir.path / "yolo11.yaml");
  const auto custom = parse("model: {yaml: " + (dir.path / "custom.yaml").string() + ", scale: s}\n");
  EXPECT_EQ(custom.spec.source, (dir.path / "custom.yaml").string());
  EXPECT_EQ(custom.spec.family, "custom");
  const auto unified = parse("model: {yaml: " + (dir.path / "yolo11l.yaml").string() + "}\n");
  EXPECT_EQ(unified.spec.source, (dir.path / "yolo11.yaml").string());
  EXPECT_EQ(unified.scale, "l");
  EXPECT_EQ(models::builtin_yolo_families(), (std::vector<std::string>{"yolov8", "yolo11", "yolo12"}));
  // model.yaml_text (what a run records) instead of reading the file: YOLOv8's rows at scale s.
  std::ifstream v8(yaml_file("yolov8"));
  const std::string v8_text((std::istreambuf_iterator<char>(v8)), std::istreambuf_iterator<char>());
  const auto recorded =
      parse("model: {yaml: gone/custom_s.yaml, yaml_text: " + nlohmann::json(v8_text).dump() + ", scale: s}\n");
  EXPECT_EQ(recorded.spec.source, "model.yaml_text (gone/custom_s.yaml)");
  models::Yolo from_text(recorded);
  EXPECT_EQ(parameter_count(*from_text), 11166560);

  // Errors name the config file or the YAML, and the field or row.
  std::string origin;
  EXPECT_EQ(error_field([] { parse("model: {yaml: yolo99.yaml}\n", "bad.yaml"); }, &origin), "model.yaml");
  EXPECT_EQ(origin.rfind("bad.yaml", 0), 0u) << origin;
  EXPECT_EQ(error_field([] { parse("model: {yaml: yolo11.yaml, scale: q}\n", "bad.yaml"); }), "model.scale");
  EXPECT_EQ(error_field([] { parse("model: {width: -1}\n", "bad.yaml"); }), "model.width");
  EXPECT_EQ(error_field([] { parse("model: {num_classes: 0}\n", "bad.yaml"); }), "model.num_classes");
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir.path / name) << text;
    return (dir.path / name).string();
  };
  const std::string rows = "backbone:\n  - [-1, 1, Conv, [16, 3, 2]]\nhead:\n";
  const std::string no_head = write("nohead.yaml", "backbone:\n  - [-1, 1, Conv, [16, 3, 2]]\n");
  EXPECT_EQ(error_field([&] { parse("model: {yaml: " + no_head + "}\n"); }, &origin), "head");
  EXPECT_EQ(origin, no_head);
  const std::string bad_row = write("badrow.yaml", rows + "  - [-1, Conv, [16]]\n");
  EXPECT_EQ(error_field([&] { parse("model: {yaml: " + bad_row + "}\n"); }), "head[0]");
  const std::string bad_scale =
      write("badscale.yaml", "scales:\n  n: [0.5, 0.25]\n" + rows + "  - [[0], 1, Detect, [nc]]\n");
  EXPECT_EQ(error_field([&] { parse("model: {yaml: " + bad_scale + "}\n"); }), "scales.n");
  // Rows meridian cannot build: ConfigError naming the YAML and the row, at construction.
  auto build_error = [&](const std::string& name, const std::string& head) {
    const auto c = parse("model: {yaml: " + write(name, rows + head) + "}\n");
    return error_field([&] { models::Yolo m(c); }, &origin);
  };
  EXPECT_EQ(build_error("unknown.yaml", "  - [-1, 1, C2fCIB, [32]]\n  - [[1], 1, Detect, [nc]]\n"), "head[0]");
  EXPECT_NE(origin.find("unknown.yaml"), std::string::npos);
  EXPECT_EQ(build_error("from.yaml", "  - [[5], 1, Detect, [nc]]\n"), "head[0]");
  EXPECT_EQ(build_error("last.yaml", "  - [[0], 1, Detect, [nc]]\n  - [-1, 1, Conv, [16, 3, 1]]\n"), "head[0]");
  EXPECT_EQ(build_error("strides.yaml",
                        "  - [-1, 1, Conv, [16, 3, 2]]\n  - [[0, 1], 1, Concat, [1]]\n  - [[2], 1, Detect, [nc]]\n"),
            "head[1]");
  EXPECT_EQ(build_error("arg.yaml", "  - [-1, 1, Conv, [16, three]]\n  - [[1], 1, Detect, [nc]]\n"), "head[0]");
  EXPECT_EQ(build_error("a2.yaml", "  - [-1, 1, A2C2f, [16, True, 1]]\n  - [[1], 1, Detect, [nc]]\n"), "head[0]");
  EXPECT_EQ(build_error("nodetect.yaml", "  - [-1, 1, Conv, [16, 3, 1]]\n"), "head");
  // Strided rows that take the stride past 65536 (before, they overflowed it to 0: SIGFPE in flops
  // and forward): the row that goes over, whether by repeats or by rows.
  EXPECT_EQ(build_error("repeats.yaml", "  - [-1, 100000, Conv, [16, 3, 2]]\n  - [[1], 1, Detect, [nc]]\n"), "head[0]");
  std::string strided;  // backbone[0] strides by 2, then head[0..14] to 65536, head[15] beyond
  for (int i = 0; i < 64; ++i) strided += "  - [-1, 1, Conv, [16, 3, 2]]\n";
  EXPECT_EQ(build_error("rows.yaml", strided + "  - [[64], 1, Detect, [nc]]\n"), "head[15]");
  const std::string at_most = "  - [-1, 15, Conv, [16, 3, 2]]\n  - [[1], 1, Detect, [nc]]\n";  // 2 x 2^15
  EXPECT_EQ(models::Yolo(parse("model: {yaml: " + write("max.yaml", rows + at_most) + "}\n"))->strides(),
            std::vector<int64_t>{65536});
}

// FLOPs: the convolutions (Ultralytics' thop count, which its summaries report) within 3% of the
// published GFLOPs for YOLOv8 and YOLO11 (thop also counts BatchNorm and the biases, and Ultralytics
// rounds), plus the attention matmuls that thop does not see.
TEST(Yolo, FlopsAgainstPublishedGflops) {
  const std::map<std::string, double> published{{"yolov8n", 8.9}, {"yolov8s", 28.8}, {"yolov8l", 165.7},
                                                {"yolo11n", 6.6}, {"yolo11s", 21.7}, {"yolo11x", 196.0}};
  for (const auto& [name, gflops] : published) {
    models::Yolo model(parse("model: {yaml: " + name + ".yaml}\n"));
    const double ours = model->flops(640) / 1e9;
    std::cout << "[ " << name << " ] " << ours << " GFLOPs at 640 (Ultralytics: " << gflops << ")\n";
    EXPECT_NEAR(ours / gflops, 1.0, 0.03) << name;
  }
  EXPECT_THROW(models::Yolo(models::YoloConfig::builtin("yolo11", "n", 80))->flops(100), std::invalid_argument);
}

// Timing, not a check (run with --gtest_also_run_disabled_tests): forward + backward of yolo11n,
// 256 px, batch 8.
TEST(Yolo, DISABLED_TimeForwardBackward) {
  torch::manual_seed(0);
  models::Yolo model(models::YoloConfig::builtin("yolo11", "n", 80));
  const auto images = torch::rand({8, 3, 256, 256});
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    at::Tensor loss = at::zeros({});
    for (const auto& l : model->forward(images)) loss = loss + l.square().mean();
    loss.backward();
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << "[ yolo11n ] forward+backward 8x3x256x256: " << sec << " s (" << at::get_num_threads()
              << " threads)\n";
  }
}

TEST(Yolo, SyncBatchNormKeepsNamesAndEqualsBatchNormOnOneRank) {
  const auto c = parse("model:\n  yaml: yolo11n.yaml\n  num_classes: 3\n  sync_bn: true\n", "sync.yaml");
  ASSERT_TRUE(c.sync_bn);
  EXPECT_FALSE(models::YoloConfig::builtin("yolo11", "n", 3).sync_bn);  // off by default
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
    if (!p.value().requires_grad()) continue;  // the DFL's fixed weights
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
