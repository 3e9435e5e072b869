#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

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

// The images to predict (data::image_inputs), not those under `out` (a previous run's drawings).
// Outputs are named by the path without its extension: two images that differ only in it are an
// error naming both.
data::ImageInputs predict_inputs(const std::string& images, const std::string& out) {
  data::ImageInputs in = data::image_inputs(images, "predict", out);
  std::map<std::string, std::string> by_stem;
  for (const auto& name : in.names) {
    const std::string stem = fs::path(name).replace_extension().string();
    const auto [at, fresh] = by_stem.emplace(stem, name);
    if (!fresh)
      throw UserError("predict: " + (fs::path(in.dir) / at->second).string() + " and " +
                      (fs::path(in.dir) / name).string() + " would both write " + stem + ".jpg and labels/" + stem +
                      ".txt; rename one");
  }
  return in;
}

cv::Scalar class_colour(int64_t c) {  // BGR, well apart for neighbouring classes
  static const int palette[][3] = {{56, 56, 255}, {151, 157, 255}, {31, 112, 255}, {29, 178, 255}, {49, 210, 207},
                                   {10, 249, 72}, {23, 204, 146},  {134, 219, 61}, {52, 147, 26},  {187, 212, 0}};
  const auto& p = palette[c % 10];
  return cv::Scalar(p[0], p[1], p[2]);
}

}  // namespace

std::string detect_file_config(Config& config, const std::string& weights) {
  if (!config.has("model.yaml")) {
    const fs::path file(weights), folder = file.has_parent_path() ? file.parent_path() : fs::path(".");
    fs::path found = fs::path(file).replace_extension(".yaml");
    if (!fs::exists(found)) {
      std::vector<fs::path> yamls;
      for (const auto& e : fs::directory_iterator(folder))
        if (e.is_regular_file() && (e.path().extension() == ".yaml" || e.path().extension() == ".yml"))
          yamls.push_back(e.path());
      if (yamls.size() != 1)
        throw UserError(weights +
                        ": which model are these weights? Give --set model.yaml=yolo11n.yaml (the model "
                        "YAML and scale they were trained as) or put that YAML beside them (" +
                        std::to_string(yamls.size()) + " YAML files in " + folder.string() + ")");
      found = yamls.front();
    }
    config.set("model.yaml", yaml_quoted(found.string()), "beside " + weights);
  }
  const std::string yaml = config.get<std::string>("model.yaml");
  std::string names_note;
  if (!config.has("task.class_names") && fs::is_regular_file(yaml)) {
    std::vector<std::string> names;
    try {
      const YAML::Node n = YAML::LoadFile(yaml)["names"];
      if (n.IsSequence())
        for (const auto& v : n) names.push_back(v.as<std::string>());
      else if (n.IsMap())  // Ultralytics' {0: person, 1: bicycle}
        for (const auto& kv : n) names.push_back(kv.second.as<std::string>());
    } catch (const YAML::Exception& e) {
      throw DataError(yaml, "names", std::string("cannot be read: ") + e.what());
    }
    if (!names.empty()) {
      std::string list;
      for (const auto& name : names) list += (list.empty() ? "" : ", ") + yaml_quoted(name);
      config.set("task.class_names", "[" + list + "]", yaml + " names");
      names_note = ", " + std::to_string(names.size()) + " class names";
    }
  }
  return " with model YAML " + yaml + names_note;
}

PredictSummary predict_detect(const comm::Runtime& rt, const ModelSource& source, const PredictOptions& o) {
  if (!o.classes.empty())
    throw UserError("predict: --classes is for zero-shot classification (siglip); " + source.path +
                    " detects the classes it was trained on");
  const std::string& out = o.out;
  const Config& config = source.config;
  const DetectSettings settings = DetectSettings::from_config(config);
  int64_t size = o.size;
  if (size == 0) size = settings.eval.image_size > 0 ? settings.eval.image_size : 640;
  if (size <= 0 || size % 32 != 0)
    throw UserError("predict: --size must be a positive multiple of 32, got " + std::to_string(size));
  const auto& names = settings.class_names;
  DetectEvalOptions eo;
  eo.image_size = size;
  eo.conf = o.conf;
  eo.iou = o.iou;
  eo.max_det = o.max_det;
  models::Yolo model = detect_model(source, rt.device());
  model->eval();
  at::NoGradGuard no_grad;

  const data::ImageInputs inputs = predict_inputs(o.images, out);
  const std::string& dir = inputs.dir;
  const auto& images = inputs.names;
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
  const int64_t found = rt.sum(boxes);
  char line[128];
  std::snprintf(line, sizeof line, "%lld detections (conf >= %.2f; labels/ in YOLO format)", (long long)found, o.conf);
  return {rt.sum(done), rt.sum(failed), line};
}

}  // namespace meridian::tasks
