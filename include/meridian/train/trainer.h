// The generic data-parallel training loop: any train::Task, on every rank.
//
//   auto settings = train::TrainerSettings::from_config(config);   // train: and optim: sections
//   train::seed(settings.seed);                                     // before the task builds its model
//   tasks::SiglipTask task(runtime, config, data_path);
//   train::Trainer trainer(runtime, task, settings, {config, run_dir});   // collective
//   auto summary = trainer.run();                                   // collective
//
// One optimizer step: `accumulate` micro-steps (next_batch, forward under autocast when
// precision is bf16, backward; gradients reduced by DistributedDataParallel during the last
// backward only; with optim.zero, by ShardedAdamW's reduce-scatter after it), then floating-point buffers (BatchNorm
// statistics) averaged over ranks, then clip by global norm, then AdamW (no weight decay where Task::decays says so) at
// the learning rate of a linear warmup followed by a cosine decay to min_lr. optim.name: sgd uses train::SGD instead
// (Nesterov momentum, coupled weight decay; the same schedule, and the momentum ramped from warmup_momentum during the
// warmup: momentum_at()). Model EMA (train.ema > 0): after every applied step train::Ema averages the weights; every
// evaluation runs on the EMA weights, swapped in and then out again (training weights restored bit
// for bit).
// NaN/Inf guard: when the loss on any rank or the gradient norm is not finite, every rank skips the
// update (gradients dropped, floating-point buffers such as BatchNorm statistics put back as they were
// before the step, step counted as bad); `max_bad_steps` bad steps in a row stop the job
// with a TrainingError on every rank.
// Timing per step (host clock; on CUDA these are launch times except where the loop synchronises):
// data wait, forward, backward, exposed communication (DDP's finish() plus the loss reduction),
// optimizer (clip + step).
// Health (train.health_every): every rank's step time, data wait, exposed communication, memory
// and a latency probe gathered on rank 0 into <run_dir>/health.jsonl, with warnings for stragglers,
// growing memory and data stalls (ops::HealthMonitor, include/meridian/ops/health.h).
// Output, rank 0 only: a progress bar on a terminal (see Progress; periodic lines otherwise,
// every log_every steps), and in the run directory config.yaml (the resolved config), metrics.csv (step,
// wall_time, name, value: one row per value) and TensorBoard event files under tensorboard/.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "meridian/core/config_schema.h"
#include "meridian/core/error.h"
#include "meridian/train/adamw.h"
#include "meridian/train/ema.h"
#include "meridian/train/sgd.h"
#include "meridian/train/task.h"
#include "meridian/train/zero.h"

namespace meridian::comm {
class Runtime;
}

namespace meridian::train {

// A training run that cannot go on (e.g. too many non-finite steps in a row); a UserError (exit 2).
class TrainingError : public UserError {
 public:
  using UserError::UserError;
};

enum class Precision { Float32, BFloat16 };
enum class Optimizer { AdamW, SGD };  // optim.name: adamw | sgd
// Rank 0's progress display: a bar redrawn in place, or a line every log_every steps. auto: the bar
// when stdout is a terminal, except under Open MPI (which gives ranks a pseudo-terminal even when
// mpirun's output goes to a file).
enum class Progress { Auto, Bar, Lines };

// The `train:` and `optim:` sections, with defaults; ConfigError names the file and the field.
struct TrainerSettings {
  // train:
  int64_t steps = 100;     // optimizer steps
  int64_t accumulate = 1;  // micro-batches per optimizer step (gradient accumulation)
  uint64_t seed = 0;
  Precision precision = Precision::Float32;  // precision: float32 | bf16 (autocast in forward)
  int64_t log_every = 10;
  int64_t eval_every = 0;              // 0: evaluate only after the last step
  bool eval_at_start = false;          // also evaluate before the first step (the untrained baseline)
  int64_t max_bad_steps = 5;           // non-finite steps in a row before the job stops
  int64_t stop_at = 0;                 // end this run after this step (hooks see stopping: a checkpoint); a run
                                       // resumed at or past it does nothing; 0: no
  int64_t health_every = 100;          // steps between health reports (<run_dir>/health.jsonl, straggler / memory /
                                       // data-wait warnings); 0: none
  Progress progress = Progress::Auto;  // progress: auto | bar | lines
  double ema = 0;                      // train.ema: model EMA decay within (0, 1) (e.g. 0.9999); 0: no EMA
  double ema_tau = 2000;               // train.ema_tau: updates over which the EMA's decay ramps up (> 0)
  // optim:
  Optimizer optimizer = Optimizer::AdamW;  // optim.name: adamw | sgd
  double momentum = 0.937;                 // sgd: momentum after the warmup, within [0, 1)
  bool nesterov = true;                    // sgd: Nesterov momentum (needs momentum and warmup_momentum > 0)
  double warmup_momentum = 0.8;            // sgd: momentum at step 0, ramped linearly to `momentum` over `warmup` steps
  double lr = 5e-4, min_lr = 1e-5, weight_decay = 1e-4, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double clip = 1.0;    // max global gradient norm; 0: no clipping (the norm is still checked)
  int64_t warmup = 10;  // steps of linear warmup
  int zero = 0;         // optim.zero: 0 (DistributedDataParallel + AdamW), 1, 2 or 3 (train::ShardedAdamW's
                        // stages; true is 1, false 0); the same updates to rounding (not with sgd)
  bool activation_checkpointing = false;  // train.activation_checkpointing: the task's blocks recompute their
                                          // activations in backward (models::BlockRunner)
  double peak_flops = 0;                  // train.peak_flops: one device's peak FLOP/s (e.g. 989e12 for an H100's
                                          // bf16 dense): reported as model FLOPs utilisation (mfu); 0: not reported
  // comm: how DistributedDataParallel reduces the gradients (parallel::DdpOptions)
  bool bf16_gradients = false;  // comm.grad_dtype: float32 | bf16 (reduced in bfloat16: half the bytes; the
                                // optimizer still gets float32 gradients); not with optim.zero
  double bucket_mb = 0;         // comm.bucket_mb: gradient bucket size in MB (of the wire dtype); 0: 2 on CPU
                                // (MPI over TCP: sending starts early in backward), 25 on CUDA (NCCL, as PyTorch)
  double first_bucket_mb = 1;   // comm.first_bucket_mb: the first bucket (the last layers), so sending starts early

  // Declares the train:, optim: and comm: keys (types, defaults from this struct, ranges, meanings).
  static void declare(ConfigSchema& schema);
  // The settings of `config`; ConfigError for what spans several keys (optim.min_lr above optim.lr,
  // sgd with optim.zero, ...). Not collective.
  static TrainerSettings from_config(const Config& config);
};

// Learning rate of optimizer step `step` (0-based): lr * (step + 1) / warmup during warmup, then
// cosine from lr down to min_lr at the last step.
double learning_rate(const TrainerSettings& settings, int64_t step);

// SGD momentum of optimizer step `step` (0-based), as ultralytics: warmup_momentum + (momentum -
// warmup_momentum) * step / warmup during warmup, then momentum.
double momentum_at(const TrainerSettings& settings, int64_t step);

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

// The counters a checkpoint saves.
struct TrainerState {
  int64_t step = 0;  // optimizer steps done (bad ones included)
  int64_t bad_steps = 0, bad_in_a_row = 0;
  int64_t samples_seen = 0;  // global samples consumed (sums over resumes with other global batches)
};

// After each optimizer step, to every hook on every rank (all ranks agree on every field).
struct StepEvent {
  int64_t steps_done = 0;
  bool last = false;      // the last step of the run
  bool stopping = false;  // the run ends here early (train.stop_at, or SIGTERM/SIGUSR1 on some rank before
                          // the last step): run() returns after the hooks
};

// Installs handlers for SIGTERM and SIGUSR1 that ask running Trainers to stop after the current
// step (Slurm sends one before the time limit with --signal). Idempotent.
void install_stop_signals();
bool stop_requested();

struct TrainSummary {
  std::vector<double> losses;  // per step, mean over ranks (NaN for bad steps)
  int64_t bad_steps = 0;
  double samples_per_s = 0;      // global, over the steps after the first (warm-up) step
  StepTimes mean_times;          // per step, mean over steps after the first and over ranks
  StepTimes max_times;           // the slowest rank's mean per phase
  double model_flops_per_s = 0;  // 3 x forward FLOPs (forward + backward) x samples/s, global
  int64_t parameters = 0;
  Metrics first_eval, last_eval;             // eval_at_start's and the last evaluation's (empty if none)
  bool stopped = false;                      // ended early (train.stop_at or a signal; the hooks saw stopping = true)
  bool signalled = false;                    // ... because of SIGTERM/SIGUSR1
  std::vector<std::string> health_warnings;  // rank 0: what the health monitor warned about
};

// A test hook (`meridian train --inject-straggler`): one rank made slow on purpose.
struct InjectedStraggler {
  int rank = -1;         // -1: none
  double data_s = 0;     // added to every batch's wait on that rank (an input straggler)
  double compute_s = 0;  // added to every forward on that rank (a compute straggler)
};

struct TrainerOptions {
  Config config;        // the resolved config (saved as <run_dir>/config.yaml)
  std::string run_dir;  // empty: no files written
  InjectedStraggler straggler;
  // Non-empty: a Chrome trace (chrome://tracing, Perfetto) of every rank's steps, written by rank 0
  // at the end of run(): data, forward, backward, each gradient bucket's reduction, the wait for
  // them, the rest of the exposed communication and the optimizer, one process per rank.
  std::string trace_path;
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

  // Called on every rank after each completed optimizer step (checkpoint hooks; may be collective
  // since every rank calls it at the same step with the same event).
  using StepHook = std::function<void(Trainer& trainer, const StepEvent& event)>;
  void add_step_hook(StepHook hook);

  int64_t step() const;  // optimizer steps done (bad ones included)
  TrainerState state() const;
  void set_state(const TrainerState& state);  // on resume, before run()
  int64_t global_batch() const;               // samples per optimizer step over all ranks
  // The optimizer: exactly one of these is non-null (sharded when optim.zero is true, sgd with
  // optim.name: sgd).
  AdamW* adamw();
  ShardedAdamW* sharded_adamw();
  SGD* sgd();
  // The model EMA (train.ema > 0), else null.
  Ema* ema();
  Task& task();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace meridian::train
