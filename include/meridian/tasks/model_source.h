// What a command's --model names, resolved once for every task and command (eval, predict,
// generate, embed, export): a meridian checkpoint (step_*.h5, best.h5), a published Hugging Face
// directory (SigLIP, Llama; its config.json's model_type names the task), or published weights in
// one file with their architecture beside them (detect: an Ultralytics .safetensors and its model
// YAML). Each task's commands build their model from it (TaskSpec::evaluate, predict, generate).
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <functional>
#include <string>

#include "meridian/core/config.h"

namespace meridian::tasks {

struct TaskSpec;

struct ModelSource {
  std::string path;        // as given
  bool published = false;  // false: a meridian checkpoint
  const TaskSpec* spec = nullptr;
  // A checkpoint: its saved config. Published: the config `train --init path` resolves (task.name,
  // task.init = path, the model: keys of config.json or of the model YAML). Both with the command's
  // keys (`adjust`).
  Config config;
  int64_t step = 0;  // a checkpoint's step; 0 for published weights
  // train.precision of `config` (float32, bf16, fp16, auto): the command runs under that autocast
  // (nn::AutocastScope), as training evaluated it; see autocast_dtype().
  std::string precision = "float32";
  std::string what;  // what was loaded, for the command's output, e.g. "Hugging Face SiglipModel directory m/"

  // The autocast dtype of `precision` on `device` (auto: ops::choose_precision's), kFloat for none.
  at::ScalarType autocast_dtype(c10::Device device) const;
};

// Not collective (every rank reads the same files). `adjust` sets the command's keys (--set, and
// what its options set) on the config before it is resolved and checked; `command` names the command
// in messages. UserError for a path that does not exist, weights whose architecture is not given
// (detect: no model YAML); DataError for a directory whose config.json names no task's model_type or
// a file that is not a checkpoint; ConfigError for a bad key.
ModelSource open_model(const std::string& path, const std::string& command,
                       const std::function<void(Config&)>& adjust = {});

// Not collective: UserError "<command>: <path> is <what> of task T, not W" unless `model` is of task
// `wanted` ("": any).
void require_model_task(const ModelSource& model, const std::string& wanted, const std::string& command);

}  // namespace meridian::tasks
