// Rank 0's files in the run directory: config.yaml (the resolved config), metrics.csv (long format:
// step,wall_time,name,value, one row per value, appended and flushed as training goes) and
// TensorBoard event files under tensorboard/. Not collective; the Trainer creates it on rank 0 only.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

#include "meridian/train/task.h"

namespace meridian::train {

class EventWriter;

class RunFiles {
 public:
  // Creates the directory; SystemError naming the path when it cannot be written.
  RunFiles(const std::string& run_dir, const std::string& config_yaml);
  ~RunFiles();
  // Writes every value as `<prefix>/<name>` (e.g. train/loss, eval/i2t_r1); flushes both files.
  void write(int64_t step, const std::string& prefix, const Metrics& metrics);

 private:
  std::string dir_;
  std::ofstream csv_;
  std::unique_ptr<EventWriter> events_;
};

}  // namespace meridian::train
