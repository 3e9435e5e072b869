#include "meridian/train/settings.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "meridian/core/config.h"
#include "meridian/core/error.h"

namespace meridian::train {

void TrainerSettings::declare(ConfigSchema& schema) {
  const TrainerSettings d;
  schema.integer("train.steps", d.steps, "optimizer steps to train").at_least(1);
  schema.integer("train.accumulate", d.accumulate, "micro-batches per optimizer step (gradient accumulation)")
      .at_least(1);
  schema.integer("train.seed", 0, "seed of the model's initialisation, the data order and augmentation").at_least(0);
  schema.choice("train.precision", {"float32", "bf16"}, "float32", "forward precision (bf16: autocast)");
  schema.integer("train.log_every", d.log_every, "steps between log lines and metrics.csv rows").at_least(1);
  schema
      .integer("train.eval_every", d.eval_every, "steps between evaluations on data.eval; 0: after the last step only")
      .at_least(0);
  schema.boolean("train.eval_at_start", d.eval_at_start,
                 "also evaluate before the first step (the untrained baseline)");
  schema.integer("train.max_bad_steps", d.max_bad_steps, "non-finite steps in a row (skipped) before the job stops")
      .at_least(1);
  schema.integer("train.stop_at", d.stop_at, "end this run after this step, with a checkpoint; 0: run to train.steps")
      .at_least(0);
  schema.integer("train.health_every", d.health_every, "steps between health reports (health.jsonl); 0: none")
      .at_least(0);
  schema.choice("train.progress", {"auto", "bar", "lines"}, "auto",
                "rank 0's progress display (auto: a bar on a terminal)");
  schema.number("train.ema", d.ema, "model EMA decay (e.g. 0.9999), used by evaluations and checkpoints; 0: no EMA")
      .at_least(0)
      .below(1);
  schema.number("train.ema_tau", d.ema_tau, "updates over which the EMA decay ramps up").above(0);
  schema.boolean("train.activation_checkpointing", d.activation_checkpointing,
                 "recompute each block's activations in backward instead of keeping them (the task's blocks: "
                 "Llama layers, SigLIP encoder layers)");
  schema.number("train.peak_flops", d.peak_flops, "one device's peak FLOP/s, for the reported MFU; 0: no MFU")
      .at_least(0);
  schema.choice("comm.grad_dtype", {"float32", "bf16"}, "float32",
                "dtype gradients are reduced in (bf16: half the bytes on the wire; the optimizer still gets float32)");
  schema
      .number("comm.bucket_mb", std::nullopt,
              "gradient bucket size in MB: each full bucket is reduced while backward goes on (smaller: sending "
              "starts earlier, more messages)")
      .above(0)
      .defaults_to("2 on CPU (MPI), 25 on CUDA (NCCL)");
  schema
      .number("comm.first_bucket_mb", d.first_bucket_mb, "size in MB of the first bucket (the last layers' gradients)")
      .above(0);
  schema.choice("optim.name", {"adamw", "sgd"}, "adamw", "optimizer");
  schema.number("optim.lr", d.lr, "peak learning rate (after warmup; cosine decay to optim.min_lr)").above(0);
  schema.number("optim.min_lr", std::nullopt, "learning rate at the last step")
      .at_least(0)
      .defaults_to("the smaller of 1e-05 and optim.lr");
  schema.integer("optim.warmup", d.warmup, "steps of linear learning-rate warmup").at_least(0);
  schema.number("optim.weight_decay", d.weight_decay, "decoupled weight decay (not on biases, norms, embeddings)")
      .at_least(0);
  schema.number("optim.beta1", d.beta1, "adamw: first-moment decay").at_least(0).below(1);
  schema.number("optim.beta2", d.beta2, "adamw: second-moment decay").at_least(0).below(1);
  schema.number("optim.eps", d.eps, "adamw: epsilon").above(0);
  schema.number("optim.clip", d.clip, "max global gradient norm; 0: no clipping").at_least(0);
  schema.choice("optim.zero", {"0", "1", "2", "3", "false", "true"}, "0",
                "ZeRO stage (adamw only): 1 shards the AdamW state across ranks, 2 also the gradients, 3 also the "
                "parameters (gathered block by block); 0: DistributedDataParallel (true: 1, false: 0)");
  schema.number("optim.momentum", d.momentum, "sgd: momentum after the warmup").at_least(0).below(1);
  schema.boolean("optim.nesterov", d.nesterov, "sgd: Nesterov momentum");
  schema
      .number("optim.warmup_momentum", d.warmup_momentum,
              "sgd: momentum at step 0, ramped to optim.momentum over optim.warmup")
      .at_least(0)
      .below(1);
}

// Types, choices and single-key ranges are the schema's (declare, checked by ConfigSchema::check); the
// checks here are the ones that involve several keys.
TrainerSettings TrainerSettings::from_config(const Config& c) {
  TrainerSettings s;
  s.steps = c.get<int64_t>("train.steps", s.steps);
  s.accumulate = c.get<int64_t>("train.accumulate", s.accumulate);
  s.seed = uint64_t(c.get<int64_t>("train.seed", 0));
  const std::string precision = c.get<std::string>("train.precision", "float32");
  if (precision == "float32")
    s.precision = Precision::Float32;
  else if (precision == "bf16")
    s.precision = Precision::BFloat16;
  else
    throw ConfigError(c.source("train.precision"), "train.precision",
                      "expected float32 or bf16, got '" + precision + "'");
  s.log_every = c.get<int64_t>("train.log_every", s.log_every);
  s.eval_every = c.get<int64_t>("train.eval_every", s.eval_every);
  s.eval_at_start = c.get<bool>("train.eval_at_start", s.eval_at_start);
  s.max_bad_steps = c.get<int64_t>("train.max_bad_steps", s.max_bad_steps);
  s.stop_at = c.get<int64_t>("train.stop_at", s.stop_at);
  s.health_every = c.get<int64_t>("train.health_every", s.health_every);
  const std::string progress = c.get<std::string>("train.progress", "auto");
  if (progress == "auto")
    s.progress = Progress::Auto;
  else if (progress == "bar")
    s.progress = Progress::Bar;
  else if (progress == "lines")
    s.progress = Progress::Lines;
  else
    throw ConfigError(c.source("train.progress"), "train.progress",
                      "expected auto, bar or lines, got '" + progress + "'");
  s.lr = c.get<double>("optim.lr", s.lr);
  s.min_lr = c.get<double>("optim.min_lr", std::min(s.min_lr, s.lr));
  s.weight_decay = c.get<double>("optim.weight_decay", s.weight_decay);
  s.beta1 = c.get<double>("optim.beta1", s.beta1);
  s.beta2 = c.get<double>("optim.beta2", s.beta2);
  s.eps = c.get<double>("optim.eps", s.eps);
  s.clip = c.get<double>("optim.clip", s.clip);
  s.warmup = c.get<int64_t>("optim.warmup", s.warmup);
  const std::string zero = c.get<std::string>("optim.zero", "0");
  s.zero = zero == "true" ? 1 : zero == "false" ? 0 : std::stoi(zero);  // the schema allows 0-3, true, false
  s.activation_checkpointing = c.get<bool>("train.activation_checkpointing", s.activation_checkpointing);
  const std::string optimizer = c.get<std::string>("optim.name", "adamw");
  if (optimizer == "adamw")
    s.optimizer = Optimizer::AdamW;
  else if (optimizer == "sgd")
    s.optimizer = Optimizer::SGD;
  else
    throw ConfigError(c.source("optim.name"), "optim.name", "expected adamw or sgd, got '" + optimizer + "'");
  s.momentum = c.get<double>("optim.momentum", s.momentum);
  s.nesterov = c.get<bool>("optim.nesterov", s.nesterov);
  s.warmup_momentum = c.get<double>("optim.warmup_momentum", s.warmup_momentum);
  s.ema = c.get<double>("train.ema", s.ema);
  s.ema_tau = c.get<double>("train.ema_tau", s.ema_tau);
  s.peak_flops = c.get<double>("train.peak_flops", s.peak_flops);
  s.bf16_gradients = c.get<std::string>("comm.grad_dtype", "float32") == "bf16";
  s.bucket_mb = c.get<double>("comm.bucket_mb", s.bucket_mb);
  s.first_bucket_mb = c.get<double>("comm.first_bucket_mb", s.first_bucket_mb);
  if (s.bf16_gradients && s.zero)
    throw ConfigError(c.source("comm.grad_dtype"), "comm.grad_dtype",
                      "bf16 gradient reduction is DistributedDataParallel's: not with optim.zero (use "
                      "train.precision bf16: bfloat16 parameters, gradients reduced in bfloat16, float32 masters)");
  if (s.zero == 3 && s.ema > 0)
    throw ConfigError(c.source("train.ema"), "train.ema",
                      "not with optim.zero 3 (the EMA keeps a full copy of the weights, which ZeRO-3 shards)");
  if (s.zero > 0 && s.precision == Precision::BFloat16 && s.ema > 0)
    throw ConfigError(c.source("train.ema"), "train.ema",
                      "not with train.precision bf16 and optim.zero (the parameters are bfloat16 then; the float32 "
                      "masters are sharded)");
  if (!(s.min_lr <= s.lr)) throw ConfigError(c.source("optim.min_lr"), "optim.min_lr", "must be within [0, optim.lr]");
  if (s.optimizer == Optimizer::SGD) {
    if (s.zero)
      throw ConfigError(c.source("optim.zero"), "optim.zero", "ZeRO shards AdamW only: not with optim.name sgd");
    if (s.nesterov && s.momentum == 0)
      throw ConfigError(c.source("optim.momentum"), "optim.momentum",
                        "must be > 0 with optim.nesterov true (or set optim.nesterov: false)");
    if (s.nesterov && s.warmup > 0 && s.warmup_momentum == 0)
      throw ConfigError(c.source("optim.warmup_momentum"), "optim.warmup_momentum",
                        "must be > 0 with optim.nesterov true (or set optim.nesterov: false)");
  }
  return s;
}

double learning_rate(const TrainerSettings& s, int64_t step) {
  if (step < s.warmup) return s.lr * double(step + 1) / double(s.warmup);
  const int64_t decay_steps = s.steps - s.warmup - 1;
  const double progress = decay_steps > 0 ? std::min(1.0, double(step - s.warmup) / double(decay_steps)) : 1.0;
  return s.min_lr + 0.5 * (s.lr - s.min_lr) * (1 + std::cos(M_PI * progress));
}

double momentum_at(const TrainerSettings& s, int64_t step) {
  if (step >= s.warmup) return s.momentum;
  return s.warmup_momentum + (s.momentum - s.warmup_momentum) * double(step) / double(s.warmup);
}

}  // namespace meridian::train
