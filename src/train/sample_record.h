// train.record_samples as an observer of the loop (private to train; sample_record.cpp): rank 0's
// RUN_DIR/samples.jsonl, one line per step naming every row each micro-batch trained on.
#pragma once

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "meridian/train/balance.h"
#include "meridian/train/observer.h"
#include "meridian/train/task.h"

namespace meridian::comm {
class Communicator;
class Runtime;
}  // namespace meridian::comm

namespace meridian::train {

class SampleRecord : public Observer {
 public:
  // Not collective. Rank 0 opens RUN_DIR/samples.jsonl to append (SystemError when it cannot);
  // ConfigError naming train.record_samples without a run directory.
  SampleRecord(const comm::Runtime& rt, comm::Communicator& control, Task& task, const Balancer& balancer,
               const std::string& run_dir, const Config& config);

  // The micro-batch's (epoch, rows) from the task.
  void on_batch(int64_t micro) override;
  // Collective (an allreduce over the control communicator, so the watchdog covers it): rank 0 appends
  // the step's rows, one line per step: {"step", "world_size", "batches": [{"epoch", "rows"}]}, a
  // micro-batch's rows every rank's in rank order (each rank fills its share's slots of the global
  // micro-batch; the sum is the whole). A resumed run writes the steps after its checkpoint again:
  // the last line of a step is the one that counts. Add it before the balance observer: the shares
  // are the step's own.
  void on_step_end(const StepEvent& event, const StepResult& result, LoopControl& control) override;

 private:
  const comm::Runtime& rt_;
  comm::Communicator& control_;
  Task& task_;
  const Balancer& balancer_;
  std::string path_;
  std::ofstream file_;                                     // rank 0
  std::vector<std::pair<int64_t, at::Tensor>> step_rows_;  // this step's (epoch, rows) per micro-batch
};

}  // namespace meridian::train
