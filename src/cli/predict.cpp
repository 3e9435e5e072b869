// `meridian predict`: runs a detect checkpoint on a directory of images; writes each image with its
// boxes drawn and a YOLO-format label file (class cx cy w h confidence, normalised to the image).
// Every rank takes every size-th image of the sorted list.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "commands.h"
#include "meridian/ckpt/checkpoint.h"
#include "meridian/ckpt/file.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/config.h"
#include "meridian/core/error.h"
#include "meridian/core/files.h"
#include "meridian/data/image_input.h"
#include "meridian/tasks/detect_task.h"

namespace meridian::cli {

namespace fs = std::filesystem;

namespace {

// Images under `dir` (recursively, sorted), not those under `out` (a previous run's drawings).
// Outputs are named by the path without its extension: two images that differ only in it are an
// error naming both.
std::vector<std::string> list_images(const std::string& dir, const std::string& out) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw UserError("predict: --images " + dir + " is not a directory");
  std::vector<std::string> images;
  try {
    images = data::list_images(dir, out);
  } catch (const fs::filesystem_error& e) {
    throw UserError("predict: cannot list " + dir + ": " + e.code().message());
  }
  std::map<std::string, std::string> by_stem;
  for (const auto& name : images) {
    const std::string stem = fs::path(name).replace_extension().string();
    const auto [at, fresh] = by_stem.emplace(stem, name);
    if (!fresh)
      throw UserError("predict: " + (fs::path(dir) / at->second).string() + " and " + (fs::path(dir) / name).string() +
                      " would both write " + stem + ".jpg and labels/" + stem + ".txt; rename one");
  }
  return images;
}

cv::Scalar class_colour(int64_t c) {  // BGR, well apart for neighbouring classes
  static const int palette[][3] = {{56, 56, 255}, {151, 157, 255}, {31, 112, 255}, {29, 178, 255}, {49, 210, 207},
                                   {10, 249, 72}, {23, 204, 146},  {134, 219, 61}, {52, 147, 26},  {187, 212, 0}};
  const auto& p = palette[c % 10];
  return cv::Scalar(p[0], p[1], p[2]);
}

}  // namespace

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
    const Config config = ckpt::saved_config(ckpt::Reader(path));
    if (config.get<std::string>("task.name", "siglip") != "detect")
      throw UserError(path + ": predict needs a detect checkpoint (task.name is " +
                      config.get<std::string>("task.name", "siglip") + ")");
    int64_t size = p["size"].as<int64_t>();
    if (size == 0) size = config.get<int64_t>("data.image_size", 0);
    if (size <= 0 || size % 32 != 0)
      throw UserError("predict: --size must be a positive multiple of 32 (the checkpoint's data.image_size is " +
                      config.text("data.image_size") + ")");
    const auto names = config.get<std::vector<std::string>>("task.class_names", {});
    tasks::DetectEvalOptions eo;
    eo.image_size = size;
    eo.conf = conf;
    eo.iou = iou;
    eo.max_det = max_det;
    models::Yolo model(models::YoloConfig::from_config(config));
    ckpt::load_module(path, *model);
    model->to(rt.device());
    model->eval();
    at::NoGradGuard no_grad;

    const auto images = list_images(dir, out);
    if (images.empty()) throw UserError("predict: no images (jpg, png, tif, bmp) under " + dir);
    std::error_code ec;
    if (rt.rank() == 0) fs::create_directories(fs::path(out) / "labels", ec);
    rt.barrier();
    int64_t done = 0, failed = 0, boxes = 0;
    for (size_t i = size_t(rt.rank()); i < images.size(); i += size_t(rt.size())) {
      const std::string& name = images[i];
      cv::Mat bgr = cv::imread((fs::path(dir) / name).string(), cv::IMREAD_COLOR);
      if (bgr.empty()) {
        spdlog::error("predict: cannot read {} (corrupt or not an image): skipped", (fs::path(dir) / name).string());
        ++failed;
        continue;
      }
      cv::Mat rgb;
      cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
      const auto found = tasks::detect_image(model, rgb, eo, rt.device());
      std::string labels;
      for (const auto& d : found) {
        char line[160];
        std::snprintf(line, sizeof line, "%lld %.6f %.6f %.6f %.6f %.6f\n", (long long)d.cls,
                      (d.x1 + d.x2) / 2 / rgb.cols, (d.y1 + d.y2) / 2 / rgb.rows, (d.x2 - d.x1) / rgb.cols,
                      (d.y2 - d.y1) / rgb.rows, d.score);
        labels += line;
        const cv::Scalar colour = class_colour(d.cls);
        const int thick = std::max(1, int(std::lround(std::max(rgb.cols, rgb.rows) / 400.0)));
        cv::rectangle(bgr, cv::Point(int(d.x1), int(d.y1)), cv::Point(int(d.x2), int(d.y2)), colour, thick);
        const std::string text = (size_t(d.cls) < names.size() ? names[size_t(d.cls)] : std::to_string(d.cls)) + " " +
                                 std::to_string(int(std::lround(100 * d.score))) + "%";
        cv::putText(bgr, text, cv::Point(int(d.x1) + 2, std::max(10, int(d.y1) - 3)), cv::FONT_HERSHEY_SIMPLEX,
                    0.35 * thick, colour, std::max(1, thick / 2));
      }
      fs::path drawn = fs::path(out) / name, label = fs::path(out) / "labels" / name;
      drawn.replace_extension(".jpg");
      label.replace_extension(".txt");
      fs::create_directories(drawn.parent_path(), ec);
      fs::create_directories(label.parent_path(), ec);
      if (!cv::imwrite(drawn.string(), bgr)) throw SystemError("predict: cannot write " + drawn.string());
      write_file_atomically(label.string(), labels);
      boxes += int64_t(found.size());
      ++done;
    }
    done = rt.sum(done);
    failed = rt.sum(failed);
    boxes = rt.sum(boxes);
    if (rt.rank() == 0)
      std::printf("predict: %lld images, %lld detections (conf >= %.2f) -> %s (labels/ in YOLO format)%s\n",
                  (long long)done, (long long)boxes, conf, out.c_str(),
                  failed ? (", " + std::to_string(failed) + " unreadable image(s) skipped").c_str() : "");
    return failed ? kExitUserError : 0;
  };
  return c;
}

}  // namespace meridian::cli
