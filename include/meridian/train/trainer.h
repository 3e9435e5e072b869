// The generic data-parallel training loop: any train::Task, on every rank.
//
//   auto settings = train::TrainerSettings::from_config(config);   // train: and optim: sections
//   train::seed(settings.seed);                                     // before the task builds its model
//   tasks::SiglipTask task(runtime, config, data_path);
//   train::Trainer trainer(runtime, task, settings, {config, run_dir});   // collective
//   auto summary = trainer.run();                                   // collective
//
// One optimizer step, driven through the run's train::Strategy (strategy.h: DDP + AdamW, DDP + SGD
// or ZeRO-1/2/3; the loop knows no optimizer): `accumulate` micro-steps (next_batch, forward under
// autocast when precision is bf16, backward; DistributedDataParallel reduces during the last
// backward only, ZeRO-2/3 reduce-scatter each unit during every backward, ZeRO-1 after the last),
// then the gradient reduction completes, the global gradient norm is clipped to optim.clip, the
// floating-point buffers (BatchNorm statistics) are averaged over ranks, and the strategy updates at
// the learning rate of a linear warmup followed by a cosine decay to min_lr (learning_rate(); SGD's
// momentum ramps over the warmup: momentum_at()). No weight decay where Task::decays says so.
// Model EMA (train.ema > 0): after every applied step train::Ema averages the weights; every
// evaluation runs on the EMA weights, swapped in and then out again (training weights restored bit
// for bit).
// NaN/Inf guard: when the loss on any rank or the gradient norm is not finite, every rank skips the
// update (gradients dropped, floating-point buffers such as BatchNorm statistics put back as they were
// before the step, step counted as bad); `max_bad_steps` bad steps in a row stop the job
// with a TrainingError on every rank.
// Timing per step (host clock; on CUDA these are launch times except where the loop synchronises):
// data wait, forward, backward, exposed communication (what backward left of the gradient
// reduction, plus the loss reduction), optimizer (clip + update).
// Health (train.health_every): every rank's step time, data wait, exposed communication, memory
// and a latency probe gathered on rank 0 into <run_dir>/health.jsonl, with warnings for stragglers,
// growing memory and data stalls (ops::HealthMonitor, include/meridian/ops/health.h).
// Output, rank 0 only (progress.cpp): a progress bar on a terminal (see Progress; periodic lines otherwise,
// every log_every steps), and in the run directory config.yaml (the resolved config), metrics.csv (step,
// wall_time, name, value: one row per value) and TensorBoard event files under tensorboard/.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "meridian/core/config_schema.h"
#include "meridian/core/error.h"
#include "meridian/train/balance.h"
#include "meridian/train/ema.h"
#include "meridian/train/observer.h"
#include "meridian/train/settings.h"
#include "meridian/train/strategy.h"
#include "meridian/train/task.h"

namespace meridian::comm {
class Runtime;
}

namespace meridian::train {

// A training run that cannot go on (e.g. too many non-finite steps in a row); a UserError (exit 2).
class TrainingError : public UserError {
 public:
  using UserError::UserError;
};

// Seeds torch's generators (CPU and CUDA) on this rank; every rank passes the same seed so models
// start identical (DDP checks and broadcasts anyway).
void seed(uint64_t seed);

// Seconds per optimizer step spent in each phase (summed over micro-steps). `comm` is the exposed
// communication after backward; `waited` is all the time this rank blocked in collectives during the
// step, wherever they were (a loss's gathers in forward and backward included): what it waited for
// the other ranks.
struct StepTimes {
  double data = 0, forward = 0, backward = 0, comm = 0, optimizer = 0, total = 0, waited = 0;
};

// The best evaluation so far by TrainerOptions::best's metric (checkpoint.best), and the evaluations
// since it (train.patience). eval_at_start's evaluation does not count: there is no checkpoint of it.
struct BestRecord {
  double value = std::numeric_limits<double>::quiet_NaN();  // NaN: no evaluation yet
  int64_t step = 0;                                         // the step it was measured at
  int64_t evals_since = 0;                                  // evaluations after it without a better value
};

// The counters a checkpoint saves.
struct TrainerState {
  int64_t step = 0;  // optimizer steps done (bad ones included)
  int64_t bad_steps = 0, bad_in_a_row = 0;
  int64_t samples_seen = 0;  // global samples consumed (sums over resumes with other global batches)
  BestRecord best;
  BalanceState balance;  // the shares in force (train.balance) and this rank's measuring window
};

// Installs handlers for SIGTERM and SIGUSR1 that ask running Trainers to stop after the current
// step (Slurm sends one before the time limit with --signal). Idempotent.
void install_stop_signals();
bool stop_requested();
// The signal that asked to stop (SIGTERM or SIGUSR1; 0: none yet). Not collective.
int stop_signal();

struct TrainSummary {
  std::vector<double> losses;  // per step, mean over ranks (NaN for bad steps)
  int64_t bad_steps = 0;
  int64_t scale_skips = -1;      // steps the fp16 loss scaler skipped (inf/NaN gradients), whole run; -1: no scaler
  double samples_per_s = 0;      // global, over the steps after the first (warm-up) step
  StepTimes mean_times;          // per step, mean over steps after the first and over ranks
  StepTimes max_times;           // the slowest rank's mean per phase
  double model_flops_per_s = 0;  // 3 x forward FLOPs (forward + backward) x samples/s, global
  double peak_flops = 0;         // per device, what MFU is measured against (train.peak_flops); 0: none
  int64_t parameters = 0;
  Metrics first_eval, last_eval;  // eval_at_start's and the last evaluation's (empty if none)
  bool stopped = false;           // ended early (train.stop_at or a signal; the observers saw stopping = true)
  bool signalled = false;         // ... because of SIGTERM/SIGUSR1
  std::string early_stop;         // ended early by an observer's stop (train.patience): why ("" otherwise; it saw last)
  BestRecord best;                // the best evaluation (value NaN without TrainerOptions::best)
  std::vector<std::string> health_warnings;  // rank 0: what the health monitor warned about
  // TrainerOptions::count_syncs on a GPU: host synchronisations per step, mean over the steps after
  // the first and the most in one of them, max over ranks; -1: not counted.
  double host_syncs_per_step = -1;
  int64_t host_syncs_max = -1;
  // train.balance auto: the share changes in this run, and the longest stretch of steps at one set
  // of shares (its first step, after a change, and the run's first step left out): steps
  // [settled_first, settled_last] and their samples/s (the slowest rank's time); -1/0 without.
  int64_t share_changes = -1;
  int64_t settled_first = 0, settled_last = 0;
  double settled_samples_per_s = 0;
};

// A test hook (`meridian train --inject-straggler`): one rank made slow on purpose.
struct InjectedStraggler {
  int rank = -1;         // -1: none
  double data_s = 0;     // added to every batch's wait on that rank (an input straggler)
  double compute_s = 0;  // added to every forward on that rank (a compute straggler)
};

// Which evaluation is the best (checkpoint.best): its metric, larger or smaller better.
struct BestMetric {
  std::string metric;  // "": none (train.patience needs one)
  bool maximize = true;
};

struct TrainerOptions {
  Config config;        // the resolved config (saved as <run_dir>/config.yaml)
  std::string run_dir;  // empty: no files written
  InjectedStraggler straggler;
  // Non-empty: a Chrome trace (chrome://tracing, Perfetto) of every rank's steps, written by rank 0
  // at the end of run(): data, forward, backward, each gradient bucket's reduction, the wait for
  // them, the rest of the exposed communication and the optimizer, one process per rank.
  std::string trace_path;
  // checkpoint.best: after each evaluation (train.eval_every, train.eval_every_epochs, the last step)
  // the trainer compares it with the best so far (StepEvent::best) and counts evaluations without
  // improvement; train.patience of them end the run (the observers see the step as the last). A run
  // resumed from such an end does nothing. TrainingError when an evaluation lacks the metric.
  BestMetric best;
  // GPU ranks: LibTorch's CUDA sync debug mode (warn) over every training step, its warnings counted
  // per step on each rank (TrainSummary::host_syncs_*): the host's waits for the device. Evaluations
  // and logging are outside the count. No effect on CPU ranks.
  bool count_syncs = false;
};

class Trainer {
 public:
  // Collective: builds the data-parallel engine over task.model() (parameters broadcast from
  // rank 0), the optimizer with its parameter groups, and rank 0's output files.
  Trainer(const comm::Runtime& runtime, Task& task, const TrainerSettings& settings, const TrainerOptions& options);
  ~Trainer();

  // Collective: runs the remaining steps and the evaluations. Throws TrainingError on every rank
  // when the NaN/Inf guard gives up.
  TrainSummary run();

  // Attaches `observer` to the loop (observer.h: its fixed points and contract), after the trainer's
  // own (the NaN guard's step, the balancer, best/patience, ...): on every rank, in the same order,
  // before run().
  void add_observer(std::unique_ptr<Observer> observer);
  // The shorthand for an observer of on_save alone (checkpoints, the run page): called on every rank
  // at each step's last point; may be collective.
  using StepHook = std::function<void(Trainer& trainer, const StepEvent& event)>;
  void add_step_hook(StepHook hook);

  int64_t step() const;  // optimizer steps done (bad ones included)
  TrainerState state() const;
  void set_state(const TrainerState& state);  // on resume, before run()
  int64_t global_batch() const;               // samples per optimizer step over all ranks
  // How gradients are reduced and parameters updated (checkpoints save and load through it).
  Strategy& strategy();
  // The model EMA (train.ema > 0), else null.
  Ema* ema();
  Task& task();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace meridian::train
