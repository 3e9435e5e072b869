// A task is one record: everything the rest of the program asks of a workload (torchtitan's
// TrainSpec). Each task fills its own in src/tasks/<task>/spec.cpp; tasks::task_specs() lists them
// (src/tasks/registry.cpp). Outside src/tasks/<task>, no code branches on a task's name: it asks the
// task's spec, and a member left null means the task has no such thing (the command then says which
// tasks have one).
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "meridian/core/config.h"
#include "meridian/core/config_schema.h"
#include "meridian/core/error.h"
#include "meridian/models/hf_checkpoint.h"
#include "meridian/tasks/checkpoint_eval.h"
#include "meridian/tasks/model_source.h"
#include "meridian/tasks/model_summary.h"
#include "meridian/tasks/predict.h"
#include "meridian/train/settings.h"
#include "meridian/train/task.h"

namespace meridian::comm {
class Runtime;
}

namespace meridian::ckpt {
class Reader;
}

namespace meridian::tasks {

// `meridian export`'s choices, for any task.
struct ExportOptions {
  std::string out;              // the directory to write (lm: a name ending in .safetensors, the weights alone)
  std::string dtype = "f32";    // f32 | bf16
  int64_t max_shard_bytes = 0;  // weight files of at most this size (tasks that shard)
  std::string tokenizer;        // where the tokenizer comes from; "": the task's default
};

// `meridian generate`'s choices, for a task that generates.
struct GenerateOptions {
  std::string prompt, input;  // the instruction and its optional input
  // How the prompt is put to the model: alpaca (the template prep text trains with), llama-2 or
  // mistral ([INST] ... [/INST]), none (the text itself); "": alpaca for a checkpoint, none for
  // published weights.
  std::string chat_template;
  std::string tokenizer;  // a dataset .h5, a SentencePiece .model or a Hugging Face directory; "": the model's
  int max_new_tokens = 64;
  double top_p = 0, temperature = 1;  // top_p 0: greedy
  uint64_t seed = 0;
};

struct GenerateResult {
  std::string prompt;  // the text the model read
  int64_t prompt_tokens = 0;
  std::string text;  // what it generated
  int64_t tokens = 0;
};

struct TaskSpec {
  const char* name = "";     // task.name
  const char* summary = "";  // what the workload is, for task.name's documentation

  // ---- the config
  // The task's own keys: its model:, task: and data: keys and train.batch (tasks::config_schema).
  void (*declare)(ConfigSchema& schema) = nullptr;
  // Hugging Face config.json's model_type that the task starts from (task.init DIR, --model DIR);
  // null: the task starts only from a file.
  const char* hf_model_type = nullptr;
  // The model: keys such a config.json gives (`origin` names the file in messages); null with
  // hf_model_type.
  std::vector<models::HfConfigKey> (*init_config_keys)(const nlohmann::json& config_json,
                                                       const std::string& origin) = nullptr;
  // What the task's published weights in one file are, e.g. "Ultralytics weights" (task.init FILE,
  // --model FILE.safetensors); null: the task has none.
  const char* published_file = nullptr;
  // Not collective: sets in `config` (task.init is the file) what the file alone does not say, from
  // what is beside it (detect: model.yaml, the class names); returns what it found, appended to
  // ModelSource::what. UserError when the architecture is nowhere. Set with published_file.
  std::string (*published_file_config)(Config& config, const std::string& weights) = nullptr;
  // optim.name auto is this task's rule and its default (resolve decides it).
  bool auto_optimizer = false;
  // Not collective; every rank calls it with the same file before the config is saved: records in
  // `config` what a checkpoint must know about the training data, and, when `auto_optimizer` (the
  // run's optim.name is auto, given or by default: describe_data decides), the optimizer by the
  // task's rule. Returns what it decided, for the log ("": nothing). Null: the task records nothing.
  std::string (*resolve)(Config& config, const std::string& train_data, int world_size, bool auto_optimizer) = nullptr;

  // ---- the model and training
  // Collective (opens the data): the train::Task of a resolved run's `config` and `trainer` settings
  // (tasks::resolve_run), its data resuming at `start`.
  std::unique_ptr<train::Task> (*make)(const comm::Runtime& runtime, const Config& config,
                                       const train::TrainerSettings& trainer, const std::string& train_data,
                                       train::DataPosition start) = nullptr;
  // Not collective: the model's layers, parameters and FLOPs from the config alone (meridian model);
  // image_size: the input size for the FLOPs where the task has one (0: its default), UserError
  // where it has none.
  ModelSummary (*summarize)(const Config& config, int64_t image_size) = nullptr;
  // The names of what the task's evaluation reports (Task::evaluate and the checkpoint's).
  std::vector<std::string> metrics;

  // ---- commands (null: the task has none)
  // Collective: `meridian eval` of `model` (a checkpoint or published weights of this task) on the
  // dataset `data_path`.
  CheckpointEval (*evaluate)(const comm::Runtime& runtime, const ModelSource& model,
                             const std::string& data_path) = nullptr;
  // Not collective, one process: `meridian export` of a checkpoint; returns the line to log.
  std::string (*export_checkpoint)(const std::string& checkpoint, const ExportOptions& options) = nullptr;
  // Collective: `meridian predict` with `model` (a checkpoint or published weights of this task).
  PredictSummary (*predict)(const comm::Runtime& runtime, const ModelSource& model,
                            const PredictOptions& options) = nullptr;
  // Not collective, one process: `meridian generate` with `model` on `device`.
  GenerateResult (*generate)(const ModelSource& model, const GenerateOptions& options,
                             const c10::Device& device) = nullptr;
  // Not collective: `meridian bench memory`: the closed-form memory per rank of `config`'s model for
  // every ZeRO stage on each world size of `ranks` (a Markdown table); lora_rank > 0 adds LoRA rows.
  std::string (*memory_table)(const Config& config, const std::vector<int64_t>& ranks, int64_t lora_rank) = nullptr;
};

// Every task, in the order docs list them (the first is task.name's default).
const std::vector<const TaskSpec*>& task_specs();

// Not collective: the spec of `config`'s task.name (the default when unset); ConfigError naming
// task.name and the known tasks for another name.
const TaskSpec& task_spec(const Config& config);

// Not collective: the spec of the task whose hf_model_type is the Hugging Face directory `dir`'s
// config.json model_type. UserError when `dir` is not a directory; DataError naming config.json's
// model_type when no task reads it.
const TaskSpec& published_task(const std::string& dir);

// The spec's `member`; UserError "<command>: <what> is of task T; <command> supports task a and b"
// when the task has none.
template <typename F>
F need(const TaskSpec& spec, F TaskSpec::*member, const std::string& command, const std::string& what);

// "siglip and detect": the tasks whose `member` is set (non-null, true), "none" when no task's is.
template <typename F>
std::string tasks_with(F TaskSpec::*member) {
  std::string with;
  for (const TaskSpec* s : task_specs())
    if (s->*member) with += std::string(with.empty() ? "" : " and ") + s->name;
  return with.empty() ? "none" : with;
}

template <typename F>
F need(const TaskSpec& spec, F TaskSpec::*member, const std::string& command, const std::string& what) {
  if (spec.*member) return spec.*member;
  throw UserError(command + ": " + what + " is of task " + spec.name + "; " + command + " supports task " +
                  tasks_with(member));
}

}  // namespace meridian::tasks
