#include "meridian/train/settings.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "meridian/core/config.h"
#include "meridian/core/config_binding.h"
#include "meridian/core/error.h"
#include "meridian/train/strategy_plan.h"

namespace meridian::train {

namespace {

// A whole-string decimal number ("1024", "6.5e4").
bool parse_number(const std::string& text, double& value) {
  if (text.empty()) return false;
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size();
}

// The train:, comm: and optim: keys, each bound to its field (in the order docs/config.md lists them).
const ConfigBinding<TrainerSettings>& bindings() {
  using S = TrainerSettings;
  static const auto table = [] {
    ConfigBinding<S> b;

    b.integer("train.steps", &S::steps, "optimizer steps to train").at_least(1);
    b.number("train.epochs", &S::epochs,
             "passes over the training data; when > 0 it sets train.steps (ceil(epochs x global batches per epoch / "
             "train.accumulate)) in place of the key")
        .at_least(0);
    b.integer("train.accumulate", &S::accumulate, "micro-batches per optimizer step (gradient accumulation)")
        .at_least(1);
    b.integer("train.seed", &S::seed, "seed of the model's initialisation, the data order and augmentation")
        .at_least(0);
    b.choice("train.precision", &S::precision,
             {{"float32", Precision::Float32},
              {"bf16", Precision::BFloat16},
              {"fp16", Precision::Float16},
              {"auto", Precision::Auto}},
             "forward precision: bf16 or fp16 autocast (float32 master weights and optimizer state; fp16 with a loss "
             "scale), or float32; auto: bf16 where the device has it (compute capability 8.0+, a CPU with "
             "avx512_bf16 or AMX), fp16 on GPUs of compute capability 7.x (V100, T4, RTX 20xx), float32 elsewhere");
    b.string("train.loss_scale", &S::loss_scale,
             "train.precision fp16: dynamic (torch.amp.GradScaler's: x0.5 and the step skipped on inf/NaN "
             "gradients, x2 after train.loss_scale_growth_interval good steps) or a fixed number (steps with "
             "inf/NaN gradients are still skipped)");
    b.number("train.loss_scale_init", &S::loss_scale_init, "train.loss_scale dynamic: the scale of the first step")
        .above(0);
    b.integer("train.loss_scale_growth_interval", &S::loss_scale_growth_interval,
              "train.loss_scale dynamic: steps in a row with finite gradients before the scale doubles")
        .at_least(1);
    b.integer("train.log_every", &S::log_every, "steps between log lines and metrics.csv rows").at_least(1);
    b.integer("train.eval_every", &S::eval_every, "steps between evaluations on data.eval; 0: after the last step only")
        .at_least(0);
    b.integer("train.eval_every_epochs", &S::eval_every_epochs,
              "also evaluate each time this many epochs of the training data end (Ultralytics' validation every "
              "epoch: 1); 0: not by epochs")
        .at_least(0);
    b.integer("train.patience", &S::patience,
              "stop after this many evaluations in a row without a better checkpoint.best metric (Ultralytics' "
              "patience); 0: never")
        .at_least(0);
    b.boolean("train.eval_at_start", &S::eval_at_start, "also evaluate before the first step (the untrained baseline)");
    b.integer("train.max_bad_steps", &S::max_bad_steps, "non-finite steps in a row (skipped) before the job stops")
        .at_least(1);
    b.integer("train.stop_at", &S::stop_at, "end this run after this step, with a checkpoint; 0: run to train.steps")
        .at_least(0);
    b.boolean("train.report", &S::report,
              "write RUN_DIR/report.html (meridian report: curves, ranks, findings, restarts) after each evaluation "
              "and at the end, on a thread of its own");
    b.boolean("train.record_samples", &S::record_samples,
              "append every step's dataset rows, every rank's, to RUN_DIR/samples.jsonl (an audit of the data order "
              "across restarts and world sizes; an allreduce per step)");
    b.integer("train.health_every", &S::health_every, "steps between health reports (health.jsonl); 0: none")
        .at_least(0);
    b.choice("train.progress", &S::progress,
             {{"auto", Progress::Auto}, {"bar", Progress::Bar}, {"lines", Progress::Lines}},
             "rank 0's progress display (auto: a bar on a terminal)");
    b.number("train.ema", &S::ema, "model EMA decay (e.g. 0.9999), used by evaluations and checkpoints; 0: no EMA")
        .at_least(0)
        .below(1);
    b.number("train.ema_tau", &S::ema_tau, "updates over which the EMA decay ramps up").above(0);
    b.choice("train.balance", &S::balance, {{"off", false}, {"auto", true}},
             "auto: each rank's share of the global batch follows its measured speed, so a slow node does not set "
             "the pace (docs/running.md, 'Uneven nodes')");
    b.integer("train.balance_every", &S::balance_every,
              "steps per measuring window of train.balance auto: the shares may change at the end of each")
        .at_least(1);
    b.integer("train.balance_max", &S::balance_max,
              "most samples one rank takes of each micro-batch under train.balance (its memory limit); at least "
              "train.batch")
        .at_least(0)
        .defaults_to("2 x train.batch");
    b.number("train.balance_threshold", &S::balance_threshold,
             "train.balance auto changes the shares only when the predicted step time falls by more than this "
             "fraction plus the estimates' scatter (and by more than a change costs over the next 3 windows)")
        .at_least(0)
        .below(1);
    b.string("train.balance_shares", &S::balance_shares,
             "the shares to start from, one per rank, summing to train.batch x ranks (e.g. 6,2); fixed with "
             "train.balance off; empty: even");
    b.boolean("train.activation_checkpointing", &S::activation_checkpointing,
              "recompute each block's activations in backward instead of keeping them (the task's blocks: "
              "Llama layers, SigLIP encoder layers)");
    b.number("train.peak_flops", &S::peak_flops,
             "one device's peak FLOP/s, for the reported MFU; 0: a known GPU's published dense peak, else the GEMM "
             "rate each rank measures at the start (meridian bench gemm), in the run's precision")
        .at_least(0);
    b.choice("comm.grad_dtype", &S::grad_dtype,
             {{"float32", Precision::Float32}, {"bf16", Precision::BFloat16}, {"fp16", Precision::Float16}},
             "dtype gradients are reduced in (bf16, fp16: half the bytes on the wire, as DDP's compression hooks; "
             "the optimizer still gets float32)");
    b.number("comm.bucket_mb", &S::bucket_mb,
             "gradient bucket size in MB: each full bucket is reduced while backward goes on (smaller: sending "
             "starts earlier, more messages)")
        .above(0)
        .defaults_to("2 on CPU (MPI), 25 on CUDA (NCCL)");
    b.number("comm.first_bucket_mb", &S::first_bucket_mb, "size in MB of the first bucket (the last layers' gradients)")
        .above(0);
    b.choice("optim.name", &S::optimizer,
             {{"adamw", Optimizer::AdamW}, {"sgd", Optimizer::SGD}, {"auto", Optimizer::Auto}},
             "optimizer (task detect also takes auto, its default: Ultralytics' optimizer=auto, docs/running.md)");
    b.choice("optim.schedule", &S::linear_decay, {{"cosine", false}, {"linear", true}},
             "learning-rate decay after the warmup, from optim.lr to optim.min_lr at the last step");
    b.number("optim.lr", &S::lr, "peak learning rate (after warmup; cosine decay to optim.min_lr)").above(0);
    b.number("optim.min_lr", &S::min_lr, "learning rate at the last step")
        .at_least(0)
        .defaults_to("the smaller of 1e-05 and optim.lr");
    b.integer("optim.warmup", &S::warmup, "steps of linear learning-rate warmup").at_least(0);
    b.number(
         "optim.warmup_ratio", &S::warmup_ratio,
         "warmup as a fraction of train.steps (transformers' warmup_ratio); when > 0 it sets optim.warmup (ceil) in "
         "place of the key")
        .at_least(0)
        .below(1);
    b.number("optim.weight_decay", &S::weight_decay, "decoupled weight decay (not on biases, norms, embeddings)")
        .at_least(0);
    b.number("optim.beta1", &S::beta1, "adamw: first-moment decay").at_least(0).below(1);
    b.number("optim.beta2", &S::beta2, "adamw: second-moment decay").at_least(0).below(1);
    b.number("optim.eps", &S::eps, "adamw: epsilon").above(0);
    b.number("optim.clip", &S::clip, "max global gradient norm; 0: no clipping").at_least(0);
    b.choice("optim.zero", &S::zero, {{"0", 0}, {"1", 1}, {"2", 2}, {"3", 3}, {"false", 0}, {"true", 1}},
             "ZeRO stage (adamw only): 1 shards the AdamW state across ranks, 2 also the gradients, 3 also the "
             "parameters (gathered block by block); 0: DistributedDataParallel (true: 1, false: 0)");
    b.boolean(
        "optim.offload", &S::offload,
        "optim.zero 3: keep the float32 master shard, the AdamW moments and the reduced gradient shard in host "
        "memory (pinned) and run AdamW on the CPU; the GPU keeps the shard in the parameters' dtype (ZeRO-Offload: "
        "16 bytes per parameter of the shard move from GPU to host memory)");
    b.number("optim.momentum", &S::momentum, "sgd: momentum after the warmup").at_least(0).below(1);
    b.boolean("optim.nesterov", &S::nesterov, "sgd: Nesterov momentum");
    b.number("optim.warmup_bias_lr", &S::warmup_bias_lr,
             "sgd: the biases' learning rate at step 0, ramped linearly to optim.lr over optim.warmup (Ultralytics' "
             "warmup_bias_lr); 0: they warm up as the rest")
        .at_least(0);
    b.number("optim.warmup_momentum", &S::warmup_momentum,
             "sgd: momentum at step 0, ramped to optim.momentum over optim.warmup")
        .at_least(0)
        .below(1);
    return b;
  }();
  return table;
}

}  // namespace

void TrainerSettings::declare(ConfigSchema& schema) { bindings().declare(schema); }

// Types, choices and single-key ranges are the schema's (declare, checked by ConfigSchema::check); the
// checks here are the ones that involve several keys.
TrainerSettings TrainerSettings::from_config(const Config& c) {
  TrainerSettings s = bindings().read(c);
  if (!c.has("optim.min_lr")) s.min_lr = std::min(s.min_lr, s.lr);
  check_strategy_settings(s, c);  // the strategy's own (strategy_plan.h)
  if (s.loss_scale != "dynamic") {
    double fixed = 0;
    if (!parse_number(s.loss_scale, fixed) || !(fixed > 0) || !std::isfinite(float(fixed)))
      throw ConfigError(c.source("train.loss_scale"), "train.loss_scale",
                        "must be dynamic or a positive number within float32's range, got '" + s.loss_scale + "'");
  }
  if (!std::isfinite(float(s.loss_scale_init)))
    throw ConfigError(c.source("train.loss_scale_init"), "train.loss_scale_init",
                      "must be within float32's range (the scale is a float32, as GradScaler's)");
  if (!(s.min_lr <= s.lr)) throw ConfigError(c.source("optim.min_lr"), "optim.min_lr", "must be within [0, optim.lr]");
  if (s.warmup_bias_lr > 0 && s.optimizer == Optimizer::AdamW)
    throw ConfigError(c.source("optim.warmup_bias_lr"), "optim.warmup_bias_lr",
                      "is SGD's (Ultralytics sets it to 0 for AdamW): not with optim.name adamw");
  if (s.optimizer == Optimizer::SGD) {
    if (s.nesterov && s.momentum == 0)
      throw ConfigError(c.source("optim.momentum"), "optim.momentum",
                        "must be > 0 with optim.nesterov true (or set optim.nesterov: false)");
    if (s.nesterov && s.warmup > 0 && s.warmup_momentum == 0)
      throw ConfigError(c.source("optim.warmup_momentum"), "optim.warmup_momentum",
                        "must be > 0 with optim.nesterov true (or set optim.nesterov: false)");
  }
  return s;
}

LossScaleSettings TrainerSettings::loss_scaling() const {
  LossScaleSettings l;
  l.dynamic = loss_scale == "dynamic";
  l.init = loss_scale_init;
  l.growth_interval = loss_scale_growth_interval;
  if (!l.dynamic) parse_number(loss_scale, l.init);
  return l;
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::BFloat16:
      return "bf16";
    case Precision::Float16:
      return "fp16";
    case Precision::Auto:
      return "auto";
    default:
      return "float32";
  }
}

TrainerSettings resolve_length(TrainerSettings s, int64_t batches_per_epoch, const Config& config) {
  if (s.epochs > 0) {
    if (batches_per_epoch <= 0)
      throw ConfigError(config.source("train.epochs"), "train.epochs",
                        "the training data's epoch length is not known to this task: give train.steps");
    s.steps = std::max<int64_t>(1, int64_t(std::ceil(s.epochs * double(batches_per_epoch) / double(s.accumulate))));
  }
  if (s.warmup_ratio > 0) s.warmup = int64_t(std::ceil(s.warmup_ratio * double(s.steps)));  // as transformers
  return s;
}

double learning_rate(const TrainerSettings& s, int64_t step) {
  if (step < s.warmup) return s.lr * double(step + 1) / double(s.warmup);
  const int64_t decay_steps = s.steps - s.warmup - 1;
  const double progress = decay_steps > 0 ? std::min(1.0, double(step - s.warmup) / double(decay_steps)) : 1.0;
  if (s.linear_decay) return s.min_lr + (s.lr - s.min_lr) * (1 - progress);
  return s.min_lr + 0.5 * (s.lr - s.min_lr) * (1 + std::cos(M_PI * progress));
}

double bias_learning_rate(const TrainerSettings& s, int64_t step) {
  if (s.warmup_bias_lr <= 0 || step >= s.warmup) return learning_rate(s, step);
  return s.warmup_bias_lr + (s.lr - s.warmup_bias_lr) * double(step) / double(s.warmup);
}

double momentum_at(const TrainerSettings& s, int64_t step) {
  if (step >= s.warmup) return s.momentum;
  return s.warmup_momentum + (s.momentum - s.warmup_momentum) * double(step) / double(s.warmup);
}

}  // namespace meridian::train
