// What `meridian eval` reports for a model (TaskSpec::evaluate).
#pragma once

#include <string>

#include "meridian/train/task.h"

namespace meridian::tasks {

struct CheckpointEval {
  std::string counts;      // what was evaluated, e.g. "2100 images, 10500 captions"
  std::string details;     // more lines (detect: one per class), "" when none
  train::Metrics metrics;  // in the order printed
};

}  // namespace meridian::tasks
