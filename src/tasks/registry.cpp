#include "meridian/tasks/registry.h"

#include <algorithm>

#include "meridian/data/format.h"
#include "meridian/tasks/detect_task.h"
#include "meridian/tasks/lm_task.h"
#include "meridian/tasks/siglip_task.h"

namespace meridian::tasks {

std::vector<std::string> task_names() { return {"siglip", "lm", "detect"}; }

std::unique_ptr<train::Task> make_task(const comm::Runtime& runtime, const Config& config, const std::string& train_data,
                                       train::DataPosition start) {
  const std::string name = config.get<std::string>("task.name", "siglip");
  if (name == "siglip") return std::make_unique<SiglipTask>(runtime, config, train_data, start);
  if (name == "lm") return std::make_unique<LmTask>(runtime, config, train_data, start);
  if (name == "detect") return std::make_unique<DetectTask>(runtime, config, train_data, start);
  std::string known;
  for (const auto& n : task_names()) known += (known.empty() ? "" : ", ") + n;
  throw ConfigError(config.origin(), "task.name", "unknown task '" + name + "' (known: " + known + ")");
}

void describe_data(Config& config, const std::string& train_data) {
  if (config.get<std::string>("task.name", "siglip") != "detect") return;
  if (config.has("task.class_names") && config.has("model.num_classes") && config.get<int64_t>("data.image_size", 0) > 0) return;
  const auto info = data::validate_dataset(train_data);
  if (!config.has("task.class_names")) {
    std::string names;
    for (const auto& n : info.class_names) names += (names.empty() ? "" : ", ") + yaml_quoted(n);
    config.set("task.class_names", "[" + names + "]");
  }
  if (config.get<int64_t>("data.image_size", 0) <= 0) config.set("data.image_size", std::to_string(info.height));
  if (!config.has("model.num_classes"))
    config.set("model.num_classes", std::to_string(std::max<size_t>(1, info.class_names.size())));
}

}  // namespace meridian::tasks
