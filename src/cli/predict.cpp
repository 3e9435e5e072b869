// `meridian predict`: runs a checkpoint of a task that predicts (TaskSpec::predict; detect) on a
// directory of images; writes each image with its boxes drawn and a YOLO-format label file (class cx
// cy w h confidence, normalised to the image). Every rank takes every size-th image of the sorted list.

#include <cstdio>

#include "commands.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/tasks/registry.h"

namespace meridian::cli {

Command predict_command() {
  Command c;
  c.name = "predict";
  c.summary = "Detect objects in a directory of images with a detect checkpoint: drawn images + YOLO txt labels";
  c.add_options = [](cxxopts::Options& o) {
    // clang-format off
    o.add_options()
        ("checkpoint", "Checkpoint file of a detect run", cxxopts::value<std::string>()->default_value(""))
        ("images", "Directory of images (jpg, png, tif, bmp; searched recursively)", cxxopts::value<std::string>()->default_value(""))
        ("out", "Output directory: <name>.jpg with boxes drawn, labels/<name>.txt (class cx cy w h confidence)", cxxopts::value<std::string>()->default_value(""))
        ("conf", "Confidence threshold", cxxopts::value<double>()->default_value("0.25"))
        ("iou", "NMS IoU threshold (class-aware)", cxxopts::value<double>()->default_value("0.7"))
        ("max-det", "Detections per image at most", cxxopts::value<int64_t>()->default_value("300"))
        ("size", "Inference size (multiple of 32); default: the training size", cxxopts::value<int64_t>()->default_value("0"));
    // clang-format on
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    const std::string path = p["checkpoint"].as<std::string>(), dir = p["images"].as<std::string>(),
                      out = p["out"].as<std::string>();
    if (path.empty() || dir.empty() || out.empty())
      throw UserError("predict: --checkpoint, --images and --out are required");
    const double conf = p["conf"].as<double>(), iou = p["iou"].as<double>();
    const int64_t max_det = p["max-det"].as<int64_t>();
    if (!(conf >= 0 && conf < 1)) throw UserError("predict: --conf must be within [0, 1)");
    if (!(iou > 0 && iou <= 1)) throw UserError("predict: --iou must be within (0, 1]");
    if (max_det < 1) throw UserError("predict: --max-det must be at least 1");
    tasks::PredictOptions o{path, dir, out, conf, iou, max_det, p["size"].as<int64_t>()};
    const auto predict = tasks::need(tasks::checkpoint_task(path), &tasks::TaskSpec::predict, "predict", path);
    const auto done = predict(rt, o);
    if (rt.rank() == 0)
      std::printf(
          "predict: %lld images, %lld detections (conf >= %.2f) -> %s (labels/ in YOLO format)%s\n",
          (long long)done.images, (long long)done.detections, conf, out.c_str(),
          done.unreadable ? (", " + std::to_string(done.unreadable) + " unreadable image(s) skipped").c_str() : "");
    return done.unreadable ? kExitUserError : 0;
  };
  return c;
}

}  // namespace meridian::cli
