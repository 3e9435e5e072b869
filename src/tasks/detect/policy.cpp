// The detect task's config policy (TaskSpec::resolve): what a checkpoint must know about the
// training data (class names, class count, image size, a model YAML of the user's own), and
// Ultralytics' optimizer=auto with the training defaults around it.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "meridian/core/config.h"
#include "meridian/data/format.h"
#include "meridian/models/yolo.h"
#include "meridian/tasks/detect_task.h"
#include "meridian/tasks/registry.h"

namespace meridian::tasks {

std::string ultralytics_auto(Config& c, int64_t images, int world_size) {
  const std::string why = "optim.name auto (Ultralytics' rule)";
  const Config given = with_defaults(c);  // the run's length as the config gives it, defaults included
  const int64_t batch = DetectSettings::from_config(c).batch * world_size;  // Ultralytics' batch: images per iteration
  const int64_t n = std::max<int64_t>(1, images), classes = models::YoloConfig::from_config(c).num_classes;
  // Ultralytics accumulates gradients up to its nominal 64 images per step (accumulate = round(64 / B)).
  const int64_t accumulate = c.has("train.accumulate")
                                 ? given.get<int64_t>("train.accumulate")
                                 : std::max<int64_t>(1, int64_t(std::nearbyint(64.0 / double(batch))));
  const int64_t steps_per_epoch = (n + batch * accumulate - 1) / (batch * accumulate);
  const double given_epochs = given.get<double>("train.epochs", 0.0);
  const double epochs = given_epochs > 0
                            ? given_epochs
                            : double(given.get<int64_t>("train.steps")) * double(batch * accumulate) / double(n);
  const double iterations = std::ceil(double(n) / double(std::max<int64_t>(batch, 64))) * epochs;
  const bool sgd = iterations > 10000;
  const double lr = sgd ? 0.01 : std::nearbyint(0.002 * 5.0 / double(4 + classes) * 1e6) / 1e6;
  std::string chosen, kept;
  const auto set = [&](const std::string& key, const std::string& value) {
    if (c.has(key)) return void(kept += (kept.empty() ? "" : ", ") + key + " " + c.text(key));
    c.set(key, value, why);
    chosen += (chosen.empty() ? "" : ", ") + key + " " + value;
  };
  c.set("optim.name", sgd ? "sgd" : "adamw", why);
  set("train.accumulate", std::to_string(accumulate));
  set("optim.lr", fmt::format("{}", lr));
  if (sgd) set("optim.momentum", "0.9"), set("optim.warmup_bias_lr", "0.1");
  if (!sgd && c.has("optim.warmup_bias_lr") && c.get<double>("optim.warmup_bias_lr") > 0) {
    c.set("optim.warmup_bias_lr", "0", why);  // as Ultralytics: no bias warmup with AdamW
    chosen += (chosen.empty() ? "" : ", ") + std::string("optim.warmup_bias_lr 0 (AdamW)");
  }
  set("optim.weight_decay", fmt::format("{}", 5e-4 * double(batch * accumulate) / 64.0));
  if (!c.has("optim.warmup_ratio"))
    set("optim.warmup", std::to_string(std::max<int64_t>(100, int64_t(std::nearbyint(3.0 * double(steps_per_epoch))))));
  set("optim.schedule", "linear");
  set("optim.min_lr", fmt::format("{}", c.get<double>("optim.lr") * 0.01));
  set("optim.clip", "10.0");
  set("train.ema", "0.9999");
  set("train.ema_tau", "2000");
  return fmt::format(
      "optim.name auto: {} ({:.0f} iterations of max({}, 64) images over {:.1f} epochs {} 10,000; {} classes){}{}{}{}",
      sgd ? "sgd" : "adamw", iterations, batch, epochs, sgd ? ">" : "<=", classes, chosen.empty() ? "" : "; set ",
      chosen, kept.empty() ? "" : "; given by the config: ", kept);
}

std::string resolve_detect(Config& config, const std::string& train_data, int world_size, bool auto_optimizer) {
  // A model YAML of the user's own goes into the run's config: checkpoints then carry it.
  if (!config.has("model.yaml_text")) {
    const auto model = models::YoloConfig::from_config(config);
    if (model.spec.source.rfind("built-in ", 0) != 0)
      config.set("model.yaml_text", nlohmann::json(model.spec.text).dump(), model.spec.source);
  }
  const bool sized = DetectSettings::from_config(config).eval.image_size > 0;
  if (config.has("task.class_names") && config.has("model.num_classes") && sized && !auto_optimizer) return "";
  const auto info = data::validate_dataset(train_data);
  if (!config.has("task.class_names")) {
    std::string names;
    for (const auto& n : info.class_names) names += (names.empty() ? "" : ", ") + yaml_quoted(n);
    config.set("task.class_names", "[" + names + "]", train_data);
  }
  if (!sized) config.set("data.image_size", std::to_string(info.height), train_data);
  if (!config.has("model.num_classes"))
    config.set("model.num_classes", std::to_string(std::max<size_t>(1, info.class_names.size())), train_data);
  return auto_optimizer ? ultralytics_auto(config, info.count, world_size) : "";
}

}  // namespace meridian::tasks
