// YOLO detectors built from an Ultralytics model YAML (issue 31): the `backbone` and `head` rows
// [from, repeats, module, args] and the `scales` n/s/m/l/x of [depth, width, max_channels], read as
// Ultralytics' parse_model reads them, into the same modules with the same state_dict names
// (model.0.conv.weight, model.0.bn.running_mean, model.22.cv2.0.0.conv.weight, ...), so an
// Ultralytics checkpoint saved as safetensors loads as it is and meridian's export loads back.
//
// Modules (Ultralytics' semantics; every Conv is Conv2d without bias + BatchNorm2d eps 1e-3,
// momentum 0.03 + SiLU, or no activation):
//   Conv [c2, k, s, p, g, d]   C2f [c2, shortcut]   C3k2 [c2, c3k, e]   SPPF [c2, k]   C2PSA [c2]
//   A2C2f [c2, a2, area, residual, mlp_ratio]   nn.Upsample [None, factor, "nearest"]   Concat [1]
//   Detect [nc]: per level cv2 (box: Conv 3x3, Conv 3x3, Conv2d 1x1 -> 4 * 16 DFL logits) and cv3
//   (class logits: YOLOv8's Conv 3x3 pair, or from YOLO11 on the depthwise DWConv + 1x1 pairs), and
//   dfl (a fixed Conv2d holding 0..15, kept for the names; decoding computes the same expectation).
// Output channels c2 of Conv/C2f/C3k2/SPPF/C2PSA/A2C2f are make_divisible(min(c2, max_channels) *
// width, 8); repeats n > 1 become max(round(n * depth), 1); C3k2 uses C3k blocks at scales m, l, x;
// A2C2f is residual with mlp_ratio 1.2 at l, x. Shipped YAMLs: jobs/configs/ultralytics/{yolov8,
// yolo11,yolo12}.yaml, compiled in (model.yaml: yolo11n.yaml needs no file).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace meridian {
class Config;
class ConfigSchema;
}  // namespace meridian

namespace meridian::comm {
class Communicator;
}

namespace meridian::models {

// One row of a model YAML: [from, repeats, module, args].
struct YoloLayerSpec {
  std::vector<int64_t> from;      // as written: -1 the previous layer, k >= 0 layer k
  int64_t repeats = 1;            // as written, before the depth multiple
  std::string module;             // "Conv", "C3k2", "nn.Upsample", "Detect", ...
  std::vector<std::string> args;  // each scalar as written: "64", "True", "None", "nc", "nearest"
  std::string field;              // "backbone[3]", "head[2]": where the row is, for messages
};

// An Ultralytics model YAML.
struct YoloSpec {
  std::string source;  // the file read, or "built-in yolo11.yaml"
  std::string family;  // the file's stem without a scale letter: "yolo11"
  std::string text;    // the YAML as read (export writes it beside the weights)
  int64_t nc = 80;
  std::string scale;                                                  // the YAML's own `scale:` ("" when absent)
  std::vector<std::pair<std::string, std::array<double, 3>>> scales;  // n -> {depth, width, max_channels}
  std::array<double, 3> multiples{1.0, 1.0, 1e9};  // depth_multiple, width_multiple (YAMLs without scales)
  std::vector<YoloLayerSpec> layers;               // backbone rows, then head rows
  // Not collective. ConfigError(source, field, problem) for text that is not a model description:
  // not YAML, no backbone/head lists, a row that is not [from, repeats, module, [args]], a scale
  // that is not [depth, width, max_channels] of positive numbers.
  static YoloSpec parse(const std::string& text, const std::string& source, const std::string& family);
};

// The compiled-in YAMLs' families: yolov8, yolo11, yolo12.
const std::vector<std::string>& builtin_yolo_families();

struct YoloConfig {
  std::string yaml = "yolo11.yaml";  // model.yaml as given
  std::string yaml_text;  // model.yaml_text: the YAML itself (a run records a file's here); '': read model.yaml
  std::string scale;      // the scale used ("" for a YAML without scales)
  int64_t num_classes = 80;
  double depth = 0.5, width = 0.25;
  int64_t max_channels = 1024;
  int64_t reg_max = 16;  // Ultralytics' Detect: 16 DFL bins per box side (fixed)
  bool sync_bn = false;  // SyncBatchNorm2d in every Conv (needs a communicator: YoloImpl)
  YoloSpec spec;

  // From the `model:` section. model.yaml: a model YAML file, or a compiled-in one by name, as
  // Ultralytics takes model=...: yolo11.yaml, or yolo11n.yaml for scale n (also when a file
  // dir/yolo11n.yaml does not exist but dir/yolo11.yaml does). model.scale picks the scale (else the
  // name's letter, the YAML's `scale:`, or its first scale); model.depth / model.width /
  // model.max_channels override the scale's; model.num_classes (else the dataset's, else the YAML's
  // nc); model.sync_bn. Not collective (reads the file). ConfigError naming the file and field: a
  // name that is neither a file nor a built-in, an unreadable or malformed YAML (naming the YAML and
  // its row), an unknown scale, non-positive multiples, num_classes < 1.
  static YoloConfig from_config(const Config& config);
  static void declare(ConfigSchema& schema);
  // A built-in YAML at a scale with nc classes: builtin("yolo11", "n", 80).
  static YoloConfig builtin(const std::string& family, const std::string& scale, int64_t num_classes);
};

class YoloImpl : public torch::nn::Module {
 public:
  // Builds the YAML's graph: the modules are children of "model" (a ModuleList), named by row.
  // ConfigError(spec.source, "head[3]", ...) for a row meridian cannot build: an unknown module, a
  // bad argument, `from` out of range, concatenated maps of different strides, a Detect that is not
  // the last row, an A2C2f width that is not a multiple of 32, C2PSA with c1 != c2, strided rows that
  // take the stride over 65536 (they shrink any input to nothing).
  // `sync_comm` (not owned; outlives the model) is used only when config.sync_bn: then every
  // BatchNorm2d is a parallel::SyncBatchNorm2d on it (same names), so forward in training mode and
  // backward are collective over it. Give it a communicator of its own (sync_bn.h says why).
  explicit YoloImpl(const YoloConfig& config, comm::Communicator* sync_comm = nullptr);
  // images float [B, 3, H, W] in 0..1, H and W multiples of the largest stride (std::invalid_argument
  // otherwise) -> one map per Detect input [B, 4*reg_max + num_classes, H/s, W/s]: Detect's raw
  // cat(cv2, cv3) (DFL logits side-major l, t, r, b with reg_max bins each, then class logits).
  std::vector<at::Tensor> forward(const at::Tensor& images);
  const std::vector<int64_t>& strides() const { return strides_; }  // of the outputs: 8, 16, 32
  // The largest of strides(): an input's height and width must be multiples of it.
  int64_t max_stride() const { return *std::max_element(strides_.begin(), strides_.end()); }
  // Forward FLOPs of one image_size^2 image: 2 * multiply-adds of every convolution, plus the
  // attention matmuls (Ultralytics' thop figure counts the convolutions only). std::invalid_argument
  // unless image_size is a positive multiple of the largest stride.
  double flops(int64_t image_size) const;
  const YoloConfig& config() const { return config_; }
  int64_t detect_index() const { return int64_t(kinds_.size()) - 1; }  // "model.<i>" of Detect
  bool synchronised_bn() const { return sync_ != nullptr; }

 private:
  YoloConfig config_;
  comm::Communicator* sync_ = nullptr;
  torch::nn::ModuleList layers_{nullptr};
  std::vector<std::vector<int64_t>> from_;  // absolute input layers of each row (-1: the image)
  std::vector<int> kinds_;                  // how each row runs (plain, concat, detect)
  std::vector<std::function<at::Tensor(const at::Tensor&)>> run_;
  std::vector<int64_t> in_stride_;  // stride of each row's (first) input
  std::vector<int64_t> strides_;
  std::vector<bool> keep_;  // outputs read later by a row other than the next
};
TORCH_MODULE(Yolo);

// Loads an Ultralytics detection state_dict saved as one .safetensors file (names as model.state_dict(),
// any float dtype) into `model`. When the file's class count (the rows of model.<D>.cv3.0.2.bias)
// differs from the model's, the class head's tensors whose shapes differ keep their initialisation
// (as Ultralytics does when fine-tuning on a new dataset) and are returned. Not collective.
// DataError naming the file: missing, unknown or misshapen tensors (load_into's message), a file
// that is not safetensors. Nothing is copied on error.
std::vector<std::string> load_ultralytics_weights(YoloImpl& model, const std::string& path);

}  // namespace meridian::models
