// The detect task's spec: Ultralytics YOLO detection, its optimizer=auto policy, COCO mAP, predict
// and export as an Ultralytics state_dict.
#include <fmt/format.h>

#include <algorithm>

#include "../specs.h"
#include "meridian/core/error.h"
#include "meridian/models/yolo.h"
#include "meridian/tasks/detect_task.h"
#include "meridian/tasks/detect_ultralytics.h"

namespace meridian::tasks {

namespace {

ModelSummary summarize_detect(const Config& config, int64_t image_size) {
  if (image_size < 0 || image_size % 32 != 0)
    throw UserError("--image-size must be a positive multiple of 32, got " + std::to_string(image_size));
  const auto mc = models::YoloConfig::from_config(config);
  int64_t size = image_size;
  if (size == 0 && config.has("data.image_size")) size = config.get<int64_t>("data.image_size");
  if (size == 0) size = 640;
  models::Yolo model(mc);
  const int64_t stride = model->max_stride();
  if (size % stride != 0)
    throw UserError("image size " + std::to_string(size) + " is not a multiple of the model's largest stride " +
                    std::to_string(stride) + " (" + mc.spec.source + "): give --image-size a multiple of it");
  return summarize_module("detect", *model, model->flops(size), fmt::format("a {}x{} image", size, size));
}

std::string export_detect_checkpoint(const std::string& checkpoint, const ExportOptions& o) {
  const auto s = export_ultralytics(checkpoint, o.out, o.dtype);
  return fmt::format(
      "export: {} tensors, {:.1f} MiB {}: {}/model.safetensors and the model YAML (Ultralytics: docs/running.md)",
      s.tensors, double(s.bytes) / (1 << 20), o.dtype, o.out);
}

}  // namespace

const TaskSpec& detect_spec() {
  static const TaskSpec spec = [] {
    TaskSpec s;
    s.name = "detect";
    s.summary = "object detection";
    s.declare = DetectTask::declare;
    s.published_file = "Ultralytics weights";
    s.published_file_config = detect_file_config;
    s.auto_optimizer = true;
    s.resolve = resolve_detect;
    s.make = make_task<DetectTask>;
    s.summarize = summarize_detect;
    s.metrics = {"map50", "map50_95"};
    s.evaluate = DetectTask::evaluate;
    s.export_checkpoint = export_detect_checkpoint;
    s.predict = predict_detect;
    return s;
  }();
  return spec;
}

}  // namespace meridian::tasks
