// The tasks meridian trains, by the name in the config's `task.name` (default: the first of
// task_specs(), siglip), and what every run's config shares: the schema, its checks, task.init's
// config.json, the task's own resolution.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "meridian/core/config_schema.h"
#include "meridian/tasks/spec.h"
#include "meridian/train/task.h"

namespace meridian::comm {
class Runtime;
}

namespace meridian::ckpt {
class Reader;
}

namespace meridian::tasks {

std::vector<std::string> task_names();

// Not collective: the config's task.name (the first task's when unset).
std::string task_name(const Config& config);

// Not collective: UserError "<checkpoint>: needs a checkpoint of a(n) <task> run (task.name is <its>)"
// unless the checkpoint's saved `config` is of task `task`.
void require_task(const Config& config, const std::string& task, const std::string& checkpoint);

// The datasets every task reads (data.train, data.eval), bound once. Not collective.
struct DataSettings {
  std::string train;  // the CLI's --data sets it
  std::string eval;   // "": no evaluation
  static DataSettings from_config(const Config& config);
};

// Every key a run of task `task` may set: task.name, data.train, data.eval, the trainer's train: and
// optim: keys, checkpoint: keys, and the task's own (its model, task: and data: keys, train.batch).
// SystemError for an unknown task name (check it first: validate_config does).
ConfigSchema config_schema(const std::string& task);

// Not collective. Checks `config` against the schema of its task.name (ConfigError: unknown task,
// unknown key with the nearest known one, wrong type, out of range; a key of another task says so)
// and restricts its reads to the declared keys.
void validate_config(Config& config);

// Not collective: applies each `key=value` of `sets` (the CLI's --set, in order) to `config`, each
// recorded as coming from "--set". The overrides alone are checked against the schema too (under
// `config`'s task.name), so a bad key names --set even where `config` is a checkpoint's saved config
// that is not checked again. UserError for an item without `=`; ConfigError as validate_config.
void apply_overrides(Config& config, const std::vector<std::string>& sets);

// Not collective: when task.init names a Hugging Face model directory (task siglip), sets the model:
// keys its config.json gives (models::siglip_config_keys), each recorded as coming from that file's
// field. ConfigError naming the key, where it was given and the config.json field when a key the
// config already sets disagrees; for another task, a directory is refused (it takes a .safetensors
// file). Call before validate_config.
void apply_init_config(Config& config);

// Not collective: `config` with every key that has a fixed default in its task's schema set to it
// (what a run uses; for --print-config and comparing ranks' configs).
Config with_defaults(const Config& config);

// docs/config.md: every key of every task, generated from the schema (`meridian config`).
std::string config_reference();

// Not collective: the task's own resolution of a run's config (TaskSpec::resolve: what a checkpoint
// must know about the training data to be used without it, e.g. detect's class names, and optim.name
// auto, the default of a task with TaskSpec::auto_optimizer; ConfigError for auto in another task).
// `world_size`: the ranks of the run. Every rank calls it with the same file, before the config is
// saved. Returns what it decided, for the log ("" none).
std::string describe_data(Config& config, const std::string& train_data, int world_size);

}  // namespace meridian::tasks
