// The tasks meridian trains, by the name in the config's `task.name` (default: siglip).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "meridian/core/config.h"
#include "meridian/train/task.h"

namespace meridian::comm {
class Runtime;
}

namespace meridian::tasks {

std::vector<std::string> task_names();

// Collective (tasks open their data collectively). `train_data` is the training dataset (the CLI's
// --data or data.train). ConfigError naming task.name for an unknown task.
// `start`: where the training data resumes (a checkpoint's epoch and position).
std::unique_ptr<train::Task> make_task(const comm::Runtime& runtime, const Config& config, const std::string& train_data,
                                       train::DataPosition start = {});

// Not collective: records what a checkpoint must know about the training data to be used without
// it (detect: task.class_names for predict's labels, model.num_classes, data.image_size), unless
// the config already says. Every rank
// calls it with the same file, before the config is saved.
void describe_data(Config& config, const std::string& train_data);

}  // namespace meridian::tasks
