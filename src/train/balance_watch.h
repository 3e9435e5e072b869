// train.balance's glue to the loop, as an observer (private to train; balance_watch.cpp): each step's
// times to the Balancer, its share changes to the task, the shares to the step's metrics, and the
// longest stretch of steps at one set of shares to the run's summary.
#pragma once

#include <string>

#include "meridian/train/balance.h"
#include "meridian/train/observer.h"
#include "meridian/train/settings.h"
#include "meridian/train/task.h"

namespace meridian::comm {
class Communicator;
}

namespace meridian::train {

// The stretches of steps at one set of shares, each without its first step (after a change: the
// batches read again) and without the run's warm-up step; the longest is kept. Pure.
class Stretches {
 public:
  struct Stretch {
    int64_t first = 0, last = -1;  // steps; empty when last < first
    double seconds = 0;            // this rank's whole step time over them
    int64_t steps() const { return last - first + 1; }
  };
  // After step `step` (measured: not the warm-up), which took `seconds`; `changed`: the shares
  // change after it.
  void add(int64_t step, double seconds, bool measured, bool changed);
  Stretch longest();

 private:
  void close();
  Stretch now_, longest_;
  bool after_change_ = false;
};

class BalanceWatch : public Observer {
 public:
  // `global_batch`: samples per optimizer step over all ranks.
  BalanceWatch(int rank, comm::Communicator& control, Task& task, Balancer& balancer, const TrainerSettings& settings,
               int64_t global_batch);

  // Not collective: shares given (train.balance_shares, or a checkpoint's) go to the task.
  void on_run_begin(int64_t step, LoopControl& control) override;
  // Collective (Balancer::rebalance on the control communicator).
  void on_step_end(const StepEvent& event, const StepResult& result, LoopControl& control) override;
  void on_log(Metrics& metrics) override;
  // Collective with train.balance auto (the stretch's time, the slowest rank's).
  void on_run_end(TrainSummary& summary) override;

 private:
  // Every rank: the balancer's shares to the task (its loader reads from the next batch on at them).
  void apply_shares(const std::string& when, const std::string& why = "");

  int rank_;
  comm::Communicator& control_;
  Task& task_;
  Balancer& balancer_;
  const TrainerSettings& s_;
  int64_t global_batch_, first_ = 0;
  bool stepped_ = false;  // a step ran in this run()
  Stretches settled_;
};

}  // namespace meridian::train
