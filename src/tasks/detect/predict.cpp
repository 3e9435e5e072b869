#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "meridian/ckpt/checkpoint.h"
#include "meridian/ckpt/file.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/config.h"
#include "meridian/core/error.h"
#include "meridian/core/files.h"
#include "meridian/data/image_input.h"
#include "meridian/tasks/detect_task.h"
#include "meridian/tasks/registry.h"

namespace meridian::tasks {

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

PredictSummary predict_detect(const comm::Runtime& rt, const PredictOptions& o) {
  const std::string &dir = o.images, &out = o.out;
  const Config config = ckpt::saved_config(ckpt::Reader(o.checkpoint));
  require_task(config, "detect", o.checkpoint);
  const DetectSettings settings = DetectSettings::from_config(config);
  int64_t size = o.size;
  if (size == 0) size = settings.eval.image_size;
  if (size <= 0 || size % 32 != 0)
    throw UserError("predict: --size must be a positive multiple of 32 (the checkpoint's data.image_size is " +
                    config.text("data.image_size") + ")");
  const auto& names = settings.class_names;
  DetectEvalOptions eo;
  eo.image_size = size;
  eo.conf = o.conf;
  eo.iou = o.iou;
  eo.max_det = o.max_det;
  models::Yolo model(models::YoloConfig::from_config(config));
  ckpt::load_module(o.checkpoint, *model);
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
    const auto found = detect_image(model, rgb, eo, rt.device());
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
  return {rt.sum(done), rt.sum(failed), rt.sum(boxes)};
}

}  // namespace meridian::tasks
