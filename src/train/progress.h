// Rank 0's reporting of a training run (private to train): the progress bar or periodic lines,
// metrics.csv and TensorBoard rows (RunFiles), evaluation lines. Every rank holds one; only rank 0's
// prints or writes. Not collective.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "meridian/train/trainer.h"
#include "run_files.h"

namespace meridian::train {

StepTimes& operator+=(StepTimes& a, const StepTimes& b);

class Reporter {
 public:
  using Clock = std::chrono::steady_clock;
  // Rank 0 with a run directory creates its files (SystemError naming the path when it cannot);
  // the bar is on when settings.progress asks for it (auto: stdout is a terminal, not under Open
  // MPI, which gives every rank a pseudo-terminal).
  Reporter(int rank, int world_size, int64_t global_batch, const Task& task, const TrainerSettings& settings,
           const TrainerOptions& options);
  ~Reporter();

  // Every rank: a finished step's times, counted in the interval the next line reports.
  void record(const StepTimes& t);
  // Time spent outside training (checkpoints, evaluations) is left out of the interval's rate.
  void exclude(Clock::duration aside) { interval_start_ += aside; }
  // Rank 0, after step `step` (1-based): the bar (at most 4 times a second) and, every log_every
  // steps and at the last, a line and a metrics row with `more()` appended (the strategy's and the
  // task's values).
  void step(int64_t step, double loss, double grad_norm, int64_t bad_steps, bool last,
            const std::function<Metrics()>& more);
  // Rank 0: an evaluation's line and metrics row.
  void evaluation(int64_t step, double seconds, const Metrics& m);
  void clear_bar();

 private:
  int rank_, world_;
  int64_t global_batch_;  // samples per optimizer step over all ranks
  const Task& task_;
  const TrainerSettings& s_;
  std::unique_ptr<RunFiles> files_;  // rank 0 with a run directory
  bool bar_ = false;
  StepTimes interval_;
  int64_t interval_steps_ = 0;
  Clock::time_point interval_start_ = Clock::now(), last_bar_ = Clock::now() - std::chrono::seconds(1);
};

}  // namespace meridian::train
