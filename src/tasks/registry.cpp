#include "meridian/tasks/registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "meridian/ckpt/checkpoint.h"
#include "meridian/ckpt/file.h"
#include "meridian/core/config_binding.h"
#include "meridian/models/hf_checkpoint.h"
#include "meridian/train/settings.h"
#include "specs.h"

namespace meridian::tasks {

namespace {

// The spec named `name`; null for none.
const TaskSpec* find_spec(const std::string& name) {
  for (const TaskSpec* s : task_specs())
    if (name == s->name) return s;
  return nullptr;
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
  std::string workloads;
  for (const TaskSpec* t : task_specs())
    workloads += std::string(workloads.empty() ? "" : ", ") + t->name + " (" + t->summary + ")";
  s.choice("task.name", task_names(), task_specs().front()->name, "the workload: " + workloads);
  data_bindings().declare(s);
  train::TrainerSettings::declare(s);
  ckpt::CheckpointSettings::declare(s);
  return s;
}

ConfigSchema task_schema(const std::string& task) {
  ConfigSchema s;
  const TaskSpec* spec = find_spec(task);
  MERIDIAN_CHECK(spec != nullptr, "no config schema for task '" + task + "'");
  spec->declare(s);
  return s;
}

}  // namespace

const std::vector<const TaskSpec*>& task_specs() {
  static const std::vector<const TaskSpec*> specs{&siglip_spec(), &lm_spec(), &detect_spec()};
  return specs;
}

const TaskSpec& task_spec(const Config& config) {
  const std::string name = task_name(config);
  if (const TaskSpec* spec = find_spec(name)) return *spec;
  std::string known;
  for (size_t i = 0; i < task_specs().size(); ++i)
    known += std::string(i == 0 ? "" : i + 1 == task_specs().size() ? " or " : ", ") + task_specs()[i]->name;
  throw ConfigError(config.source("task.name"), "task.name", "expected one of " + known + ", got '" + name + "'");
}

const TaskSpec& published_task(const std::string& dir) {
  if (!std::filesystem::is_directory(dir))
    throw UserError(dir + " is not a directory (a Hugging Face model directory with config.json)");
  const auto json = models::read_hf_config(dir);
  const std::string type = json.value("model_type", std::string());
  std::string known;
  for (const TaskSpec* s : task_specs()) {
    if (!s->hf_model_type) continue;
    if (type == s->hf_model_type) return *s;
    known += std::string(known.empty() ? "" : ", ") + s->hf_model_type + " (task " + s->name + ")";
  }
  throw DataError(dir + "/config.json", "model_type", "is '" + type + "'; meridian reads " + known);
}

std::vector<std::string> task_names() {
  std::vector<std::string> names;
  for (const TaskSpec* s : task_specs()) names.push_back(s->name);
  return names;
}

DataSettings DataSettings::from_config(const Config& config) { return data_bindings().read(config); }

std::string task_name(const Config& config) {
  const std::string name = config.text("task.name");
  return name.empty() ? task_specs().front()->name : config.get<std::string>("task.name");
}

void require_task(const Config& config, const std::string& task, const std::string& checkpoint) {
  const std::string its = task_name(config);
  if (its != task) throw UserError(checkpoint + ": needs a checkpoint of task " + task + " (task.name is " + its + ")");
}

ConfigSchema config_schema(const std::string& task) {
  ConfigSchema s = common_schema();
  s.add(task_schema(task));
  return s;
}

Config with_defaults(const Config& config) { return config_schema(task_spec(config).name).with_defaults(config); }

void apply_init_config(Config& config) {
  const std::string init = config.get<std::string>("task.init", "");
  if (!init.empty() && !std::filesystem::exists(init))
    throw ConfigError(config.source("task.init"), "task.init",
                      init + " does not exist (a Hugging Face model directory or a .safetensors file)");
  if (init.empty() || !std::filesystem::is_directory(init)) return;
  const TaskSpec& spec = task_spec(config);
  if (!spec.init_config_keys)
    throw ConfigError(config.source("task.init"), "task.init",
                      init + " is a directory; task " + spec.name + " starts from one .safetensors file");
  const std::string origin = init + "/config.json";
  const auto keys = spec.init_config_keys(models::read_hf_config(init), origin);
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
  const std::string task = task_spec(config).name;
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

void apply_overrides(Config& config, const std::vector<std::string>& sets) {
  if (sets.empty()) return;
  Config overrides = Config::parse("", "--set");
  if (!config.text("task.name").empty())
    overrides.set("task.name", config.text("task.name"), config.source("task.name"));
  for (const auto& kv : sets) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) throw UserError("--set: expected key=value, got '" + kv + "'");
    config.set(kv.substr(0, eq), kv.substr(eq + 1), "--set");
    overrides.set(kv.substr(0, eq), kv.substr(eq + 1), "--set");
  }
  validate_config(overrides);
}

std::string config_reference() {
  std::string out =
      "# Config reference\n\n"
      "Generated by `meridian config` from the schema the code declares (each area next to the code that\n"
      "reads its keys); a test fails when this file is out of date. A config is YAML with the sections below;\n"
      "`--set key=value` overrides one key. An unknown key, a key given twice in one map, a wrong type or\n"
      "a value out of range is an error (exit 2) that names the key and where it came from.\n"
      "`meridian train --print-config` prints the resolved config, defaults included, each value with its source.\n\n"
      "## Every task\n\n" +
      common_schema().markdown_table();
  for (const auto& task : task_names()) out += "\n## task.name: " + task + "\n\n" + task_schema(task).markdown_table();
  return out;
}

std::string describe_data(Config& config, const std::string& train_data, int world_size) {
  const TaskSpec& spec = task_spec(config);
  const bool auto_optimizer =
      config.has("optim.name") ? config.get<std::string>("optim.name") == "auto" : spec.auto_optimizer;
  if (auto_optimizer && !spec.auto_optimizer)
    throw ConfigError(
        config.source("optim.name"), "optim.name",
        "auto is Ultralytics' rule, for task " + tasks_with(&TaskSpec::auto_optimizer) + ": give adamw or sgd");
  return spec.resolve ? spec.resolve(config, train_data, world_size, auto_optimizer) : "";
}

}  // namespace meridian::tasks
