#include "meridian/tasks/registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "meridian/ckpt/checkpoint.h"
#include "meridian/ckpt/file.h"
#include "meridian/core/config_binding.h"
#include "meridian/data/format.h"
#include "meridian/models/hf_checkpoint.h"
#include "meridian/models/llama_hf.h"
#include "meridian/models/siglip.h"
#include "meridian/tasks/detect_task.h"
#include "meridian/tasks/lm_task.h"
#include "meridian/tasks/siglip_task.h"
#include "meridian/train/trainer.h"

namespace meridian::tasks {

namespace {

constexpr const char* kDefaultTask = "siglip";

// What each task provides, by name: its config keys, its train::Task, its checkpoint evaluation.
struct TaskKind {
  const char* name;
  void (*declare)(ConfigSchema&);
  std::unique_ptr<train::Task> (*make)(const comm::Runtime&, const Config&, const std::string&, train::DataPosition);
  CheckpointEval (*evaluate)(const comm::Runtime&, const ckpt::Reader&, const Config&,
                             const std::string&);  // null: none
};

template <typename T>
std::unique_ptr<train::Task> make(const comm::Runtime& rt, const Config& c, const std::string& data,
                                  train::DataPosition start) {
  return std::make_unique<T>(rt, c, data, start);
}

const std::vector<TaskKind>& kinds() {
  static const std::vector<TaskKind> k{
      {"siglip", SiglipTask::declare, make<SiglipTask>, SiglipTask::evaluate_checkpoint},
      {"lm", LmTask::declare, make<LmTask>, LmTask::evaluate_checkpoint},
      {"detect", DetectTask::declare, make<DetectTask>, DetectTask::evaluate_checkpoint},
  };
  return k;
}

// The kind named by the config's task.name (ConfigError naming the known ones otherwise).
const TaskKind& kind_of(const Config& config) {
  const std::string name = config.text("task.name").empty() ? kDefaultTask : config.get<std::string>("task.name");
  for (const auto& k : kinds())
    if (name == k.name) return k;
  std::string known;
  for (size_t i = 0; i < kinds().size(); ++i)
    known += std::string(i == 0 ? "" : i + 1 == kinds().size() ? " or " : ", ") + kinds()[i].name;
  throw ConfigError(config.source("task.name"), "task.name", "expected one of " + known + ", got '" + name + "'");
}

const ConfigBinding<DataSettings>& data_bindings() {
  static const auto table = [] {
    ConfigBinding<DataSettings> b;
    b.string("data.train", &DataSettings::train, "training dataset (.h5 from meridian prep); --data sets it")
        .defaults_to("--data");
    b.string("data.eval", &DataSettings::eval, "evaluation dataset; '': no evaluation");
    return b;
  }();
  return table;
}

ConfigSchema common_schema() {
  ConfigSchema s;
  s.choice("task.name", task_names(), kDefaultTask,
           "the workload: siglip (image-text), lm (language-model SFT), detect");
  data_bindings().declare(s);
  train::TrainerSettings::declare(s);
  ckpt::CheckpointSettings::declare(s);
  return s;
}

ConfigSchema task_schema(const std::string& task) {
  ConfigSchema s;
  const auto it = std::find_if(kinds().begin(), kinds().end(), [&](const TaskKind& k) { return task == k.name; });
  MERIDIAN_CHECK(it != kinds().end(), "no config schema for task '" + task + "'");
  it->declare(s);
  return s;
}

}  // namespace

std::vector<std::string> task_names() {
  std::vector<std::string> names;
  for (const auto& k : kinds()) names.push_back(k.name);
  return names;
}

DataSettings DataSettings::from_config(const Config& config) { return data_bindings().read(config); }

std::string task_name(const Config& config) { return config.get<std::string>("task.name", kDefaultTask); }

void require_task(const Config& config, const std::string& task, const std::string& checkpoint) {
  const std::string its = task_name(config);
  if (its != task)
    throw UserError(checkpoint + ": needs a checkpoint of " + (task == "lm" ? "an " : "a ") + task +
                    " run (task.name is " + its + ")");
}

ConfigSchema config_schema(const std::string& task) {
  ConfigSchema s = common_schema();
  s.add(task_schema(task));
  return s;
}

Config with_defaults(const Config& config) { return config_schema(kind_of(config).name).with_defaults(config); }

void apply_init_config(Config& config) {
  const std::string init = config.get<std::string>("task.init", "");
  if (!init.empty() && !std::filesystem::exists(init))
    throw ConfigError(config.source("task.init"), "task.init",
                      init + " does not exist (a Hugging Face model directory or a .safetensors file)");
  if (init.empty() || !std::filesystem::is_directory(init)) return;
  const std::string task = task_name(config);
  if (task != "siglip" && task != "lm")
    throw ConfigError(config.source("task.init"), "task.init",
                      init + " is a directory; task " + task + " starts from one .safetensors file");
  const std::string origin = init + "/config.json";
  const auto json = models::read_hf_config(init);
  const auto keys =
      task == "siglip" ? models::siglip_config_keys(json, origin) : models::llama_config_keys(json, origin);
  const auto value_of = [&](const std::string& key) {
    for (const auto& k : keys)
      if (k.key == key) return std::stod(k.yaml);
    return 0.0;
  };
  for (const auto& k : keys) {
    if (!config.has(k.key)) {
      config.set(k.key, k.yaml, origin + " " + k.field);
      continue;
    }
    const bool flag = k.yaml == "true" || k.yaml == "false";
    const bool differs = flag ? config.get<bool>(k.key) != (k.yaml == "true") : [&] {
      const double given = config.get<double>(k.key), wanted = std::stod(k.yaml);
      return std::abs(given - wanted) > 1e-9 * std::max(1.0, std::abs(wanted));
    }();
    if (differs)
      throw ConfigError(config.source(k.key), k.key,
                        "is " + config.text(k.key) + ", but " + origin + " field '" + k.field + "' is " + k.yaml +
                            " (task.init " + init + "): remove the key or start from a matching checkpoint");
  }
  // An explicit mlp_ratio must give the checkpoint's MLP width.
  for (const std::string tower : {"model.vision", "model.text"}) {
    if (!config.has(tower + ".mlp_ratio")) continue;
    const double ratio = config.get<double>(tower + ".mlp_ratio"), width = value_of(tower + ".width");
    if (std::llround(width * ratio) != std::llround(value_of(tower + ".intermediate")))
      throw ConfigError(config.source(tower + ".mlp_ratio"), tower + ".mlp_ratio",
                        "is " + config.text(tower + ".mlp_ratio") + ": " + fmt::format("{}", width * ratio) +
                            " MLP units, but " + origin + " gives intermediate_size " +
                            fmt::format("{}", value_of(tower + ".intermediate")) + " (task.init " + init + ")");
  }
}

void validate_config(Config& config) {
  const std::string task = kind_of(config).name;
  config_schema(task).check(config, [&](const std::string& key) {
    std::vector<std::string> owners;
    for (const auto& other : task_names())
      if (other != task && task_schema(other).find(key)) owners.push_back(other);
    if (owners.empty()) return std::string();
    std::string list;
    for (const auto& o : owners) list += (list.empty() ? "" : " and ") + o;
    return "not a key of task " + task + " (task.name); it is a key of task " + list;
  });
}

std::string config_reference() {
  std::string out =
      "# Config reference\n\n"
      "Generated by `meridian config` from the schema the code declares (each area next to the code that\n"
      "reads its keys); a test fails when this file is out of date. A config is YAML with the sections below;\n"
      "`--set key=value` overrides one key. An unknown key, a key given twice in one map, a wrong type or\n"
      "a value out of range is an error (exit 2) that names the key and where it came from.\n"
      "`meridian train --print-config` prints the resolved config, defaults included.\n\n"
      "## Every task\n\n" +
      common_schema().markdown_table();
  for (const auto& task : task_names()) out += "\n## task.name: " + task + "\n\n" + task_schema(task).markdown_table();
  return out;
}

std::unique_ptr<train::Task> make_task(const comm::Runtime& runtime, const Config& config,
                                       const std::string& train_data, train::DataPosition start) {
  return kind_of(config).make(runtime, config, train_data, start);
}

CheckpointEval evaluate_checkpoint(const comm::Runtime& runtime, const ckpt::Reader& reader, const Config& config,
                                   const std::string& data_path) {
  const TaskKind& kind = kind_of(config);
  if (!kind.evaluate) {
    std::string supported;
    for (const auto& k : kinds())
      if (k.evaluate) supported += std::string(supported.empty() ? "" : " and ") + k.name;
    throw UserError(reader.path() + ": eval supports the " + supported + " tasks (this checkpoint is " + kind.name +
                    ")");
  }
  return kind.evaluate(runtime, reader, config, data_path);
}

std::string describe_data(Config& config, const std::string& train_data, int world_size) {
  const bool detect = task_name(config) == "detect";
  const bool auto_optimizer = config.has("optim.name") ? config.get<std::string>("optim.name") == "auto" : detect;
  if (!detect) {
    if (auto_optimizer)
      throw ConfigError(config.source("optim.name"), "optim.name",
                        "auto is Ultralytics' rule, for task detect: give adamw or sgd");
    return "";
  }
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
    config.set("task.class_names", "[" + names + "]");
  }
  if (!sized) config.set("data.image_size", std::to_string(info.height));
  if (!config.has("model.num_classes"))
    config.set("model.num_classes", std::to_string(std::max<size_t>(1, info.class_names.size())));
  return auto_optimizer ? ultralytics_auto(config, info.count, world_size) : "";
}

}  // namespace meridian::tasks
