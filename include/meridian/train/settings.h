// The `train:`, `optim:` and `comm:` sections of a config as the training loop uses them, and the
// schedules derived from them (learning rate, SGD momentum). Not collective.
#pragma once

#include <cstdint>
#include <string>

#include "meridian/core/config_schema.h"
#include "meridian/train/loss_scale.h"

namespace meridian::train {

// train.precision: the forward's autocast dtype (float32: none); auto is resolved from the device
// before training (tasks::resolve_precision). Also comm.grad_dtype's values (not auto).
enum class Precision { Float32, BFloat16, Float16, Auto };
// "float32", "bf16", "fp16", "auto": the config's spelling.
const char* precision_name(Precision p);
enum class Optimizer { AdamW, SGD, Auto };  // optim.name: adamw | sgd | auto (resolved by the detect task first)
// Rank 0's progress display: a bar redrawn in place, or a line every log_every steps. auto: the bar
// when stdout is a terminal, except under Open MPI (which gives ranks a pseudo-terminal even when
// mpirun's output goes to a file).
enum class Progress { Auto, Bar, Lines };

// The `train:` and `optim:` sections, with defaults; ConfigError names the file and the field.
struct TrainerSettings {
  // train:
  int64_t steps = 100;     // optimizer steps
  double epochs = 0;       // train.epochs: when > 0, steps come from the data (resolve_length)
  int64_t accumulate = 1;  // micro-batches per optimizer step (gradient accumulation)
  int64_t seed = 0;
  Precision precision = Precision::Float32;  // precision: float32 | bf16 | fp16 (autocast in forward) | auto
  // fp16's loss scaling (used with precision fp16 only; loss_scaling() below):
  std::string loss_scale = "dynamic";         // train.loss_scale: dynamic or a fixed number (checked)
  double loss_scale_init = 65536;             // train.loss_scale_init
  int64_t loss_scale_growth_interval = 2000;  // train.loss_scale_growth_interval
  int64_t log_every = 10;
  int64_t eval_every = 0;              // 0: evaluate only after the last step
  int64_t eval_every_epochs = 0;       // also evaluate when every this many epochs end; 0: not by epochs
  int64_t patience = 0;                // stop after this many evaluations without a better best metric; 0: never
  bool eval_at_start = false;          // also evaluate before the first step (the untrained baseline)
  bool report = true;                  // RUN_DIR/report.html after each evaluation and at the end
  bool record_samples = false;         // RUN_DIR/samples.jsonl: every step's dataset rows (an audit of the data order)
  int64_t max_bad_steps = 5;           // non-finite steps in a row before the job stops
  int64_t stop_at = 0;                 // end this run after this step (hooks see stopping: a checkpoint); a run
                                       // resumed at or past it does nothing; 0: no
  int64_t health_every = 100;          // steps between health reports (<run_dir>/health.jsonl, straggler / memory /
                                       // data-wait warnings); 0: none
  Progress progress = Progress::Auto;  // progress: auto | bar | lines
  double ema = 0;                      // train.ema: model EMA decay within (0, 1) (e.g. 0.9999); 0: no EMA
  double ema_tau = 2000;               // train.ema_tau: updates over which the EMA's decay ramps up (> 0)
  // Uneven batch shares (train::Balancer, balance.h):
  bool balance = false;             // train.balance: off | auto (shares from measured speed)
  int64_t balance_every = 5;        // train.balance_every: steps per measuring window (>= 1)
  int64_t balance_max = 0;          // train.balance_max: most samples per rank per micro-batch; 0: 2 x train.batch
  double balance_threshold = 0.02;  // train.balance_threshold: the predicted gain a change needs, within [0, 1)
  std::string balance_shares;       // train.balance_shares: the shares to start from ("6,2"); "": even
  // optim:
  Optimizer optimizer = Optimizer::AdamW;  // optim.name: adamw | sgd
  double momentum = 0.937;                 // sgd: momentum after the warmup, within [0, 1)
  bool nesterov = true;                    // sgd: Nesterov momentum (needs momentum and warmup_momentum > 0)
  double warmup_momentum = 0.8;            // sgd: momentum at step 0, ramped linearly to `momentum` over `warmup` steps
  double warmup_bias_lr = 0;               // sgd: the biases' lr at step 0, ramped linearly to lr over `warmup`; 0: off
  double lr = 5e-4, min_lr = 1e-5, weight_decay = 1e-4, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double clip = 1.0;          // max global gradient norm; 0: no clipping (the norm is still checked)
  int64_t warmup = 10;        // steps of linear warmup
  double warmup_ratio = 0;    // optim.warmup_ratio: when > 0, warmup = round(ratio x steps) (resolve_length)
  bool linear_decay = false;  // optim.schedule: cosine (false) | linear (Ultralytics' lf: lr to min_lr in a line)
  int zero = 0;               // optim.zero: 0 (DistributedDataParallel + AdamW), 1, 2 or 3 (train::ShardedAdamW's
                              // stages; true is 1, false 0); the same updates to rounding (not with sgd)
  bool offload = false;       // optim.offload: ZeRO-3's float32 state in host memory, AdamW on the CPU
                              // (ZeroOptions::offload); needs optim.zero 3
  bool activation_checkpointing = false;  // train.activation_checkpointing: the task's blocks recompute their
                                          // activations in backward (nn::BlockRunner)
  // train.peak_flops: one device's peak FLOP/s (e.g. 989e12 for an H100's bf16 dense), the denominator
  // of the reported model FLOPs utilisation (mfu); 0: none (run_training sets the published or
  // measured peak, ops::device_peak)
  double peak_flops = 0;
  // comm: how DistributedDataParallel reduces the gradients (parallel::DdpOptions)
  // comm.grad_dtype: float32 | bf16 | fp16 (reduced in 16 bits: half the bytes; the optimizer still
  // gets float32 gradients); not with optim.zero
  Precision grad_dtype = Precision::Float32;
  double bucket_mb = 0;        // comm.bucket_mb: gradient bucket size in MB (of the wire dtype); 0: 2 on CPU
                               // (MPI over TCP: sending starts early in backward), 25 on CUDA (NCCL, as PyTorch)
  double first_bucket_mb = 1;  // comm.first_bucket_mb: the first bucket (the last layers), so sending starts early

  // Declares the train:, optim: and comm: keys (types, defaults from this struct, ranges, meanings).
  static void declare(ConfigSchema& schema);
  // The settings of `config`; ConfigError for what spans several keys (optim.min_lr above optim.lr,
  // sgd with optim.zero, ...). Not collective.
  static TrainerSettings from_config(const Config& config);
  // The loss scaler's settings of train.loss_scale* (from_config checked them).
  LossScaleSettings loss_scaling() const;
};

// Not collective: `s` with train.epochs and optim.warmup_ratio turned into steps, given the training
// data's global batches per epoch (train::Task::batches_per_epoch): steps = ceil(epochs x
// batches_per_epoch / accumulate), at least 1; warmup = ceil(warmup_ratio x steps). Unchanged when
// neither is set. ConfigError (train.epochs) when epochs is set and batches_per_epoch is 0.
TrainerSettings resolve_length(TrainerSettings s, int64_t batches_per_epoch, const Config& config);

// Learning rate of optimizer step `step` (0-based): lr * (step + 1) / warmup during warmup, then
// cosine (optim.schedule: linear: a straight line) from lr down to min_lr at the last step.
double learning_rate(const TrainerSettings& settings, int64_t step);

// The biases' learning rate with optim.warmup_bias_lr > 0, as Ultralytics: warmup_bias_lr + (lr -
// warmup_bias_lr) * step / warmup during warmup, then learning_rate(); learning_rate() when it is 0.
double bias_learning_rate(const TrainerSettings& settings, int64_t step);

// SGD momentum of optimizer step `step` (0-based), as ultralytics: warmup_momentum + (momentum -
// warmup_momentum) * step / warmup during warmup, then momentum.
double momentum_at(const TrainerSettings& settings, int64_t step);

}  // namespace meridian::train
