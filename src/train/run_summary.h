// The run's closing figures, as an observer of the loop (private to train; run_summary.cpp): the step
// times over the steps after the warm-up, mean over ranks and the slowest rank's, the throughput and
// model FLOP/s from them, and the Chrome trace (TrainerOptions::trace_path) gathered on rank 0.
#pragma once

#include <string>

#include "meridian/core/trace.h"
#include "meridian/train/observer.h"
#include "meridian/train/trainer.h"

namespace meridian::train {

class RunSummary : public Observer {
 public:
  // `trace`: every rank's (null: none); `global_batch`: samples per optimizer step over all ranks.
  RunSummary(const comm::Runtime& rt, comm::Communicator& control, const Task& task, int64_t global_batch,
             const core::Trace* trace, std::string trace_path)
      : rt_(rt),
        control_(control),
        task_(task),
        global_batch_(global_batch),
        trace_(trace),
        trace_path_(std::move(trace_path)) {}

  void on_run_begin(int64_t step, LoopControl& control) override { first_ = step; }
  void on_step_end(const StepEvent& event, const StepResult& result, LoopControl& control) override;
  // Collective unless the run was stopped (train.stop_at, a signal) or ran no step: no figures then.
  void on_run_end(TrainSummary& summary) override;

 private:
  const comm::Runtime& rt_;
  comm::Communicator& control_;
  const Task& task_;
  int64_t global_batch_, first_ = 0, measured_steps_ = 0;
  bool stepped_ = false;  // a step ran in this run()
  StepTimes measured_;    // every step after the first
  const core::Trace* trace_;
  std::string trace_path_;
};

}  // namespace meridian::train
