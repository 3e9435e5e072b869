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

}  // namespace meridian::tasks
