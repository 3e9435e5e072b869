// Peak memory after the first steps, as an observer of the loop (private to train; peak_memory.cpp):
// rank 0 logs every rank's peak next to the strategy's closed form (Strategy::memory).
#pragma once

#include "meridian/train/observer.h"
#include "meridian/train/strategy.h"

namespace meridian::comm {
class Communicator;
class Runtime;
}  // namespace meridian::comm

namespace meridian::train {

class PeakMemory : public Observer {
 public:
  // `steps`: train.steps (a run shorter than 3 steps reports after its last).
  PeakMemory(const comm::Runtime& rt, comm::Communicator& control, const Strategy& strategy, int64_t steps)
      : rt_(rt), control_(control), strategy_(strategy), steps_(steps) {}

  void on_run_begin(int64_t step, LoopControl& /*control*/) override { first_ = step; }
  // Collective after the run's third step: on a GPU the device memory LibTorch's allocator has held at
  // most (tensors: activations, weights, optimizer state, the batch), on the CPU the resident memory
  // (getrusage: the whole process, LibTorch and the batch included); max and min over ranks.
  void on_step_end(const StepEvent& event, const StepResult& result, LoopControl& control) override;

 private:
  const comm::Runtime& rt_;
  comm::Communicator& control_;
  const Strategy& strategy_;
  int64_t steps_, first_ = 0;
};

}  // namespace meridian::train
