#include "meridian/tasks/registry.h"

#include "meridian/tasks/lm_task.h"
#include "meridian/tasks/siglip_task.h"

namespace meridian::tasks {

std::vector<std::string> task_names() { return {"siglip", "lm"}; }

std::unique_ptr<train::Task> make_task(const comm::Runtime& runtime, const Config& config, const std::string& train_data,
                                       train::DataPosition start) {
  const std::string name = config.get<std::string>("task.name", "siglip");
  if (name == "siglip") return std::make_unique<SiglipTask>(runtime, config, train_data, start);
  if (name == "lm") return std::make_unique<LmTask>(runtime, config, train_data, start);
  std::string known;
  for (const auto& n : task_names()) known += (known.empty() ? "" : ", ") + n;
  throw ConfigError(config.origin(), "task.name", "unknown task '" + name + "' (known: " + known + ")");
}

}  // namespace meridian::tasks
