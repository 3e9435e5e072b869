// `meridian predict`: runs a model of a task that predicts (TaskSpec::predict) on a directory of
// images or one image file, every rank its share. detect: each image with its boxes drawn and a
// YOLO-format label file (class cx cy w h confidence, normalised to the image); siglip: zero-shot
// classification into --classes, the top-k classes of each image with their probabilities (CSV).
#include <cstdio>
#include <fstream>

#include "commands.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/nn/autocast.h"
#include "meridian/tasks/registry.h"

namespace meridian::cli {

namespace {

// --classes: a file with one name per line (blank lines skipped), else the names separated by commas.
std::vector<std::string> class_list(const std::string& given) {
  std::vector<std::string> names;
  std::ifstream file(given);
  if (file && given.find(',') == std::string::npos) {
    for (std::string line; std::getline(file, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") != std::string::npos) names.push_back(line);
    }
    if (names.empty()) throw UserError("predict: --classes " + given + ": no class names (one per line)");
    return names;
  }
  size_t start = 0;
  for (;;) {
    const size_t comma = given.find(',', start);
    std::string name = given.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t a = name.find_first_not_of(" \t"), b = name.find_last_not_of(" \t");
    names.push_back(a == std::string::npos ? "" : name.substr(a, b - a + 1));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return names;
}

}  // namespace

Command predict_command() {
  Command c;
  c.name = "predict";
  c.summary =
      "Run a model on images: boxes drawn + YOLO txt labels (detect), or zero-shot top-k classes as CSV (siglip "
      "--classes)";
  c.add_options = [](cxxopts::Options& o) {
    add_model_option(o, "The model to run");
    // clang-format off
    o.add_options()
        ("images", "A directory of images (jpg, png, tif, bmp; searched recursively) or one image file", cxxopts::value<std::string>()->default_value(""))
        ("out", "detect: output directory (<name>.jpg with boxes drawn, labels/<name>.txt: class cx cy w h confidence); siglip: the CSV file to write (image,rank,class,probability)", cxxopts::value<std::string>()->default_value(""))
        ("conf", "detect: confidence threshold", cxxopts::value<double>()->default_value("0.25"))
        ("iou", "detect: NMS IoU threshold (class-aware)", cxxopts::value<double>()->default_value("0.7"))
        ("max-det", "detect: detections per image at most", cxxopts::value<int64_t>()->default_value("300"))
        ("size", "detect: inference size (multiple of 32); default: the training size, else 640", cxxopts::value<int64_t>()->default_value("0"))
        ("classes", "siglip: the classes, a file with one per line or \"a,b,c\" (put in the task.prompts templates)", cxxopts::value<std::string>()->default_value(""))
        ("top-k", "siglip: the best classes written per image", cxxopts::value<int64_t>()->default_value("5"))
        ("tokenizer", "siglip: a Hugging Face directory or dataset; default: the model's", cxxopts::value<std::string>()->default_value(""))
        ("batch", "siglip: images per forward on each rank", cxxopts::value<int64_t>()->default_value("32"))
        ("set", "Override a value of the model's config (e.g. task.prompts, model.yaml)", cxxopts::value<std::vector<std::string>>());
    // clang-format on
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    tasks::PredictOptions o;
    o.images = p["images"].as<std::string>();
    o.out = p["out"].as<std::string>();
    if (o.images.empty() || o.out.empty()) throw UserError("predict: --model, --images and --out are required");
    o.conf = p["conf"].as<double>();
    o.iou = p["iou"].as<double>();
    o.max_det = p["max-det"].as<int64_t>();
    o.size = p["size"].as<int64_t>();
    o.top_k = p["top-k"].as<int64_t>();
    o.batch = p["batch"].as<int64_t>();
    o.tokenizer = p["tokenizer"].as<std::string>();
    if (!(o.conf >= 0 && o.conf < 1)) throw UserError("predict: --conf must be within [0, 1)");
    if (!(o.iou > 0 && o.iou <= 1)) throw UserError("predict: --iou must be within (0, 1]");
    if (o.max_det < 1) throw UserError("predict: --max-det must be at least 1");
    if (o.batch < 1) throw UserError("predict: --batch must be at least 1");
    if (const std::string classes = p["classes"].as<std::string>(); !classes.empty()) o.classes = class_list(classes);
    const auto model = open_model_option(p, rt, "predict");
    const nn::AutocastScope precision(rt.device().type(), model.autocast_dtype(rt.device()));
    const auto predict = tasks::need(*model.spec, &tasks::TaskSpec::predict, "predict", model.path);
    const auto done = predict(rt, model, o);
    if (rt.rank() == 0)
      std::printf(
          "predict: %lld images, %s -> %s%s\n", (long long)done.images, done.found.c_str(), o.out.c_str(),
          done.unreadable ? (", " + std::to_string(done.unreadable) + " unreadable image(s) skipped").c_str() : "");
    return done.unreadable ? kExitUserError : 0;
  };
  return c;
}

}  // namespace meridian::cli
