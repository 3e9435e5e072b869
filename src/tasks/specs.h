// Each task's spec (tasks/spec.h), defined in src/tasks/<task>/spec.cpp; registry.cpp lists them.
// A new task adds its line here and in task_specs().
#pragma once

#include <memory>

#include "meridian/tasks/spec.h"

namespace meridian::tasks {

const TaskSpec& siglip_spec();  // src/tasks/siglip/spec.cpp
const TaskSpec& lm_spec();      // src/tasks/lm/spec.cpp
const TaskSpec& detect_spec();  // src/tasks/detect/spec.cpp

// TaskSpec::make for a train::Task whose constructor takes make's arguments.
template <typename T>
std::unique_ptr<train::Task> make_task(const comm::Runtime& runtime, const Config& config,
                                       const train::TrainerSettings& trainer, const std::string& train_data,
                                       train::DataPosition start) {
  return std::make_unique<T>(runtime, config, trainer, train_data, start);
}

}  // namespace meridian::tasks
