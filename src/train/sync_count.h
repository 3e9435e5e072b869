// TrainerOptions::count_syncs as an observer of the loop (private to train; sync_count.cpp): on a GPU,
// LibTorch's CUDA sync debug mode over every training step, its warnings counted instead of printed:
// the host's waits for the device (.item(), a blocking copy, nonzero, a stream synchronize).
#pragma once

#include <memory>

#include "meridian/train/observer.h"

namespace meridian::comm {
class Communicator;
}

namespace meridian::train {

class SyncCount : public Observer {
 public:
  // `gpu`: this rank trains on a GPU (on a CPU nothing is counted: the summary says -1).
  SyncCount(comm::Communicator& control, bool gpu);
  ~SyncCount() override;

  void on_run_begin(int64_t step, LoopControl& control) override;
  void on_step_begin(int64_t step) override;
  // Ends the step's count: add this observer first, so that the others' work is not counted.
  void on_step_end(const StepEvent& event, const StepResult& result, LoopControl& control) override;
  // Collective: the mean per step after the first and the most in one step, max over ranks.
  void on_run_end(TrainSummary& summary) override;

 private:
  class Counter;
  comm::Communicator& control_;
  bool gpu_;
  std::unique_ptr<Counter> counter_;  // during a step
  int64_t first_ = 0, last_ = 0, total_ = 0, most_ = 0;
};

}  // namespace meridian::train
