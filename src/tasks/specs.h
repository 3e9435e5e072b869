// Each task's spec (tasks/spec.h), defined in src/tasks/<task>/spec.cpp; registry.cpp lists them.
// A new task adds its line here and in task_specs().
#pragma once

#include "meridian/tasks/spec.h"

namespace meridian::tasks {

const TaskSpec& siglip_spec();  // src/tasks/siglip/spec.cpp
const TaskSpec& lm_spec();      // src/tasks/lm/spec.cpp
const TaskSpec& detect_spec();  // src/tasks/detect/spec.cpp

}  // namespace meridian::tasks
