#include "meridian/train/trainer.h"

#include <ATen/autocast_mode.h>
#include <malloc.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <torch/utils.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <set>
#include <thread>

#include "meridian/comm/communicator.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/trace.h"
#include "meridian/models/autocast.h"
#include "meridian/ops/facts.h"
#include "meridian/ops/health.h"
#include "meridian/parallel/ddp.h"
#include "run_files.h"

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

void seed(uint64_t value) { torch::manual_seed(value); }

namespace {
// Set from a signal handler on whichever thread receives the signal (lock-free: signal-safe).
std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free);
extern "C" void on_stop_signal(int) { g_stop.store(true, std::memory_order_relaxed); }
}  // namespace

void install_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART;  // system calls in flight (file reads, sleeps) resume instead of failing
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
}

bool stop_requested() { return g_stop.load(std::memory_order_relaxed); }

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Autocast to bfloat16 on the model's device while alive; the cache of casted weights is cleared
// at the end (it would otherwise hold the pre-update weights into the next step).
class Autocast {
 public:
  Autocast(c10::DeviceType device, bool enabled) : device_(device), enabled_(enabled) {
    if (enabled_) models::AutocastState{true, at::kBFloat16}.apply(device_);
  }
  ~Autocast() {
    if (!enabled_) return;
    models::AutocastState{false, at::kBFloat16}.apply(device_);
    at::autocast::clear_cache();
  }

 private:
  c10::DeviceType device_;
  bool enabled_;
};

// Every step frees and allocates the same activation buffers again. glibc's defaults return large
// blocks to the kernel (mmap above a threshold that adapts, trimming the heap top), so each step
// page-faults them back in; keeping them in the heap is about 3% of a CPU step (bench train).
void keep_freed_memory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's maximum: blocks below 32 MiB come from the heap
  mallopt(M_TRIM_THRESHOLD, 1 << 30);   // give the heap top back only beyond 1 GiB free
  mallopt(M_TOP_PAD, 64 << 20);
}

// Tells whether this CPU computes bfloat16 natively (else autocast still works, only slowly).
bool cpu_has_bf16() {
  std::FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (!f) return false;
  char line[8192];
  bool found = false;
  while (!found && std::fgets(line, sizeof line, f))
    found = std::string(line).rfind("flags", 0) == 0 && (std::string(line).find(" avx512_bf16") != std::string::npos ||
                                                         std::string(line).find(" amx_bf16") != std::string::npos);
  std::fclose(f);
  return found;
}

std::string duration_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = int64_t(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", long(s / 3600), long(s / 60 % 60));
  else
    std::snprintf(buf, sizeof buf, "%ldm%02lds", long(s / 60), long(s % 60));
  return buf;
}

StepTimes& operator+=(StepTimes& a, const StepTimes& b) {
  a.data += b.data, a.forward += b.forward, a.backward += b.backward, a.comm += b.comm, a.optimizer += b.optimizer,
      a.total += b.total, a.waited += b.waited;
  return a;
}

}  // namespace

struct Trainer::Impl {
  const comm::Runtime& rt;
  Task& task;
  TrainerSettings s;
  TrainerOptions o;
  std::shared_ptr<torch::nn::Module> model;
  std::vector<at::Tensor> parameters;
  std::vector<at::Tensor> float_buffers;  // BatchNorm statistics and the like: put back after a skipped step
  std::unique_ptr<comm::Communicator> grad_comm, control;  // control: losses, flags, timings (CPU, MPI)
  std::unique_ptr<comm::Communicator> gather_comm;         // ZeRO-3's parameter gathers
  std::unique_ptr<parallel::DistributedDataParallel> ddp;  // without optim.zero
  std::unique_ptr<AdamW> optimizer;                        // adamw without optim.zero
  std::unique_ptr<SGD> sgd;                                // optim.name sgd
  std::unique_ptr<Ema> ema;                                // train.ema > 0
  std::unique_ptr<ShardedAdamW> sharded;                   // with optim.zero (reduces the gradients itself)
  std::unique_ptr<RunFiles> files;                         // rank 0 with a run directory
  std::unique_ptr<core::Trace> trace;                      // options.trace_path set
  std::unique_ptr<ops::HealthMonitor> health;              // every rank, when train.health_every > 0
  std::vector<StepHook> hooks;
  int64_t step = 0, bad_in_a_row = 0, bad_total = 0, samples_seen = 0;
  int64_t parameter_count = 0;               // counted before ZeRO-3 frees the parameters
  ZeroMemoryReport closed_form;              // of the chosen stage, before activations (AdamW only)
  bool stopping = false, signalled = false;  // agreed this step: the run ends here (stop_at, or a signal on some rank)
  bool bar = false;                          // rank 0 on a terminal: progress bar

  Impl(const comm::Runtime& runtime, Task& t, const TrainerSettings& settings, const TrainerOptions& options)
      : rt(runtime), task(t), s(settings), o(options), model(t.model()) {
    parameters = model->parameters();
    for (const auto& b : model->buffers())
      if (b.is_floating_point()) float_buffers.push_back(b);
    keep_freed_memory();
    grad_comm = comm::make_communicator(rt, comm::default_backend(rt));
    control = comm::make_communicator(rt, comm::Backend::MPI);
    models::BlockRunner* blocks = task.blocks();
    if (s.activation_checkpointing) {
      if (!blocks)
        throw ConfigError(o.config.source("train.activation_checkpointing"), "train.activation_checkpointing",
                          "task " + task.name() + " has no blocks to recompute");
      blocks->set_checkpointing(true);
    }
    if (s.optimizer == Optimizer::AdamW) {
      closed_form = memory_of(s.zero, blocks);  // before ZeRO-3 frees the parameters
      check_memory(blocks);
    }
    if (s.zero > 0)
      parallel::broadcast_module(*grad_comm, *model);
    else
      ddp = std::make_unique<parallel::DistributedDataParallel>(
          rt, *grad_comm, model, parallel::DdpOptions{bucket_mb(), s.first_bucket_mb, false, s.bf16_gradients});

    // AdamW with two groups: decayed and not (Task::decays; biases, norms, temperature, bias).
    ParamGroup decaying{{}, s.weight_decay, {}}, constant{{}, 0.0, {}};
    for (const auto& item : model->named_parameters()) {
      if (!item.value().requires_grad()) continue;  // frozen (LoRA's base weights): not trained
      auto& group = task.decays(item.key(), item.value()) ? decaying : constant;
      group.params.push_back(item.value());
      group.names.push_back(item.key());
    }
    int64_t decayed_count = 0, plain_count = 0;  // before ZeRO-3 frees the parameters
    for (const auto& p : decaying.params) decayed_count += p.numel();
    for (const auto& p : constant.params) plain_count += p.numel();
    parameter_count = decayed_count + plain_count;
    const AdamWOptions adamw_options{s.lr, s.beta1, s.beta2, s.eps};
    if (s.optimizer == Optimizer::SGD) {
      sgd = std::make_unique<SGD>(std::vector<ParamGroup>{decaying, constant},
                                  SGDOptions{s.lr, momentum_at(s, 0), s.nesterov, 0});
    } else if (s.zero > 0) {
      // ZeRO-3's parameter gathers run in forward's order, its gradient reductions in backward's:
      // each on its own communicator.
      if (s.zero == 3) gather_comm = comm::make_communicator(rt, comm::default_backend(rt));
      sharded = std::make_unique<ShardedAdamW>(
          std::vector<ParamGroup>{decaying, constant}, adamw_options, *grad_comm,
          ZeroOptions{s.zero, kBucketNumel, blocks, model->parameters(), gather_comm.get(), parameter_dtype()});
    } else {
      optimizer = std::make_unique<AdamW>(std::vector<ParamGroup>{decaying, constant}, adamw_options);
    }
    if (parameter_dtype() != at::kFloat)  // frozen parameters (LoRA's base) in bfloat16 too: no master needed
      for (auto& p : model->parameters())
        if (!p.requires_grad() && p.is_floating_point()) p.set_data(p.detach().to(parameter_dtype()));

    // After the broadcast: every rank starts its EMA from the same weights.
    if (s.ema > 0) ema = std::make_unique<Ema>(*model, s.ema, s.ema_tau);

    if (s.health_every > 0) health = std::make_unique<ops::HealthMonitor>(rt, *control, o.run_dir);
    if (!o.trace_path.empty()) {
      trace = std::make_unique<core::Trace>(rt.rank());
      if (ddp) ddp->set_trace(trace.get());
    }
    if (rt.rank() == 0) {
      spdlog::info("resolved config ({}):\n{}", o.config.origin(), o.config.dump());
      if (!o.run_dir.empty()) files = std::make_unique<RunFiles>(o.run_dir, o.config.dump());
      // Open MPI gives every rank's stdout a pseudo-terminal whatever mpirun's own output is, so
      // under Open MPI a bar only on request (train.progress: bar).
      bar = s.progress == Progress::Bar ||
            (s.progress == Progress::Auto && isatty(fileno(stdout)) && !std::getenv("OMPI_COMM_WORLD_RANK"));
      spdlog::info(
          "{}: {:.2f}M trained parameters ({} tensors with weight decay {}, {} without: {} values), {:.3f} GFLOP per "
          "sample forward; {} ranks ({} node{}) x batch {} x accumulate {} = {} samples per step; {} steps; {}",
          task.name(), (decayed_count + plain_count) / 1e6, decaying.params.size(), s.weight_decay,
          constant.params.size(), plain_count, task.flops_per_sample() / 1e9, rt.size(), rt.node_count(),
          rt.node_count() == 1 ? "" : "s", task.batch_size(), s.accumulate, global_batch(), s.steps,
          s.precision == Precision::BFloat16 ? "bf16 autocast" : "float32");
      if (sgd) {
        spdlog::info("optimizer: SGD, {} momentum {} (from {} over the {} warmup steps), coupled weight decay",
                     s.nesterov ? "Nesterov" : "plain", s.momentum, s.warmup_momentum, s.warmup);
      } else {
        spdlog::info("{}{}", closed_form.to_string(),
                     s.activation_checkpointing ? "; activations: recomputed block by block in backward" : "");
      }
      if (ddp)
        spdlog::info("gradients: reduced in {} during backward, {} buckets of {} MB (the first {} MB)",
                     s.bf16_gradients ? "bfloat16" : "float32", ddp->bucket_count(), bucket_mb(), s.first_bucket_mb);
      if (ema) spdlog::info("model EMA: decay {} (tau {} updates); evaluations use the EMA weights", s.ema, s.ema_tau);
      if (s.precision == Precision::BFloat16 && rt.device().is_cpu() && !cpu_has_bf16())
        spdlog::warn(
            "train.precision bf16: this CPU has no native bfloat16 (avx512_bf16/amx_bf16); expect it to be slow");
    }
  }

  // bfloat16 parameters (with float32 master shards) under ZeRO with precision bf16; else float32.
  at::ScalarType parameter_dtype() const {
    return s.zero > 0 && s.precision == Precision::BFloat16 ? at::kBFloat16 : at::kFloat;
  }

  // The closed-form memory of each stage for this model and world (before activations).
  ZeroMemoryReport memory_of(int stage, models::BlockRunner* blocks) const {
    // Trained parameters by the stage's formula; frozen ones (LoRA's base) replicated as they are.
    int64_t numel = 0, frozen = 0, largest = 0, in_blocks = 0, largest_outside = 0;
    std::set<const void*> in_block;
    if (blocks)
      for (const auto& block : blocks->blocks()) {
        int64_t n = 0;
        for (const auto& p : block->parameters())
          if (p.requires_grad()) n += p.numel(), in_block.insert(p.unsafeGetTensorImpl());
        largest = std::max(largest, n), in_blocks += n;
      }
    for (const auto& p : model->parameters()) {
      (p.requires_grad() ? numel : frozen) += p.numel();
      if (p.requires_grad() && !in_block.count(p.unsafeGetTensorImpl()))
        largest_outside = std::max(largest_outside, p.numel());
    }
    // Units outside blocks: buckets of kBucketNumel elements, a larger parameter alone (ZeroOptions).
    const int64_t outside = numel - in_blocks, bytes = stage > 0 && s.precision == Precision::BFloat16 ? 2 : 4;
    const int64_t unit = std::max({largest, largest_outside, std::min(outside, kBucketNumel)});
    auto r = ZeroMemoryReport::of_stage(stage, numel, rt.size(), unit, outside, bytes);
    r.frozen_bytes = bytes * frozen;
    r.parameter_bytes += r.frozen_bytes;
    return r;
  }

  // Bytes per rank a report needs beyond the float32 parameters the task has already allocated.
  static int64_t beyond_allocated(const ZeroMemoryReport& r) {
    return r.total() - 4 * r.numel - r.frozen_bytes / r.parameter_element_bytes * 4;
  }

  // Collective: every rank's peak resident memory so far (getrusage), logged by rank 0 next to the
  // closed form of the chosen stage (CPU: the whole process, LibTorch and the batch included).
  void report_peak_memory(int64_t steps) {
    struct rusage usage {};
    getrusage(RUSAGE_SELF, &usage);
    const double mine = double(usage.ru_maxrss) * 1024;  // KiB on Linux
    at::Tensor peaks = at::tensor({mine, -mine}, at::kDouble);
    control->allreduce(peaks, comm::ReduceOp::Max);
    if (rt.rank() != 0 || s.optimizer != Optimizer::AdamW) return;
    const double gib = double(int64_t(1) << 30);
    spdlog::info(
        "memory after {} step(s): peak resident {:.2f} GiB per rank (max over ranks; min {:.2f}); closed form "
        "of optim.zero {}: {:.2f} GiB before activations",
        steps, peaks[0].item<double>() / gib, -peaks[1].item<double>() / gib, s.zero,
        double(closed_form.total()) / gib);
  }

  // Collective: a run whose optimizer state cannot fit in a node's free memory is refused on every
  // rank before anything is allocated (instead of the kernel killing one rank at the first step and
  // the others waiting for it). The closed form of the chosen stage beyond the parameters the task
  // already holds (closed_form), times the ranks on the node, against MemAvailable. CPU ranks only:
  // on CUDA an allocation that fails is an exception.
  void check_memory(models::BlockRunner* blocks) {
    std::string mine;
    if (rt.device().is_cpu()) {
      const auto& report = closed_form;
      const double more = double(beyond_allocated(report)) * rt.local_size();
      const auto memory = ops::memory_facts();
      const double gib = double(int64_t(1) << 30);
      if (memory.available >= 0 && more > memory.available) {
        std::string fits;
        for (int stage = 1; stage <= 3; ++stage) {
          const auto other = memory_of(stage, blocks);
          if (double(beyond_allocated(other)) * rt.local_size() <= 0.9 * memory.available)
            fits += fmt::format("{}optim.zero {} ({:.2f} GiB per rank)", fits.empty() ? "" : ", ", stage,
                                double(other.total()) / gib);
        }
        mine = fmt::format(
            "out of memory: optim.zero {} needs {:.2f} GiB per rank before activations (parameters {:.2f}, "
            "gradients {:.2f}, optimizer state {:.2f}, buffers {:.2f}); the {} rank(s) on {} need {:.2f} GiB more "
            "than the parameters already allocated, and {:.2f} GiB is available there. {}",
            s.zero, double(report.total()) / gib, double(report.parameter_bytes) / gib,
            double(report.gradient_bytes) / gib, double(report.optimizer_bytes) / gib,
            double(report.buffer_bytes) / gib, rt.local_size(), rt.host(), more / gib, memory.available / gib,
            fits.empty() ? "No ZeRO stage fits either: use more nodes or a smaller model."
                         : "Stages that fit: " + fits + " (with train.activation_checkpointing for the activations).");
      }
    }
    for (const auto& message : rt.allgather(mine))
      if (!message.empty()) throw UserError(message);
  }

  double bucket_mb() const { return s.bucket_mb > 0 ? s.bucket_mb : rt.device().is_cuda() ? 25.0 : 2.0; }

  int64_t global_batch() const { return task.batch_size() * s.accumulate * rt.size(); }

  void zero_grads() {
    at::NoGradGuard no_grad;
    for (auto& p : parameters)
      if (p.grad().defined()) p.mutable_grad().zero_();
  }

  // A phase that started at t0 ends now: its seconds added to `total`, and its span to the trace.
  void end_phase(double& total, const char* phase, Clock::time_point t0) {
    const auto now = Clock::now();
    total += std::chrono::duration<double>(now - t0).count();
    if (trace) trace->span(phase, "step", t0, now, "compute");
  }

  // Is this the rank --inject-straggler slows down (by `seconds`)?
  bool injected(double seconds) const { return seconds > 0 && o.straggler.rank == rt.rank(); }

  // One optimizer step; returns the mean loss over ranks (NaN when the step was skipped).
  double train_step(StepTimes& t, double& grad_norm) {
    const auto start = Clock::now();
    const double blocked_before = comm::blocked_seconds();
    // Floating-point buffers (BatchNorm statistics) as they were: a skipped step puts them back.
    std::vector<at::Tensor> buffers_before;
    for (const auto& b : float_buffers) buffers_before.push_back(b.detach().clone());
    at::Tensor loss_sum = at::zeros({}, at::kDouble);
    for (int64_t micro = 0; micro < s.accumulate; ++micro) {
      if (ddp) ddp->set_sync(micro + 1 == s.accumulate);
      auto t0 = Clock::now();
      task.next_batch();
      if (injected(o.straggler.data_s)) std::this_thread::sleep_for(std::chrono::duration<double>(o.straggler.data_s));
      end_phase(t.data, "data", t0);
      t0 = Clock::now();
      at::Tensor loss;
      {
        Autocast autocast(rt.device().type(), s.precision == Precision::BFloat16);
        if (sharded) sharded->gather_outside_blocks();  // ZeRO-3: embeddings, heads
        loss = task.forward();
      }
      if (injected(o.straggler.compute_s))
        std::this_thread::sleep_for(std::chrono::duration<double>(o.straggler.compute_s));
      if (s.accumulate > 1) loss = loss / double(s.accumulate);
      end_phase(t.forward, "forward", t0);
      t0 = Clock::now();
      loss.backward();
      loss_sum += loss.detach().to(at::kCPU, at::kDouble);
      end_phase(t.backward, "backward", t0);
      if (sharded) {  // ZeRO-2/3: the gradient reductions backward did not leave done
        t0 = Clock::now();
        sharded->end_backward();
        end_phase(t.comm, "exposed comm", t0);
      }
    }
    auto t0 = Clock::now();
    if (ddp) ddp->finish();
    // With ZeRO the gradients are reduce-scattered here; the norm is of the averaged gradient.
    if (sharded) grad_norm = sharded->reduce_gradients();
    // Every rank learns whether any rank's loss was not finite, and the mean loss.
    const double local = loss_sum.item<double>();
    auto agreed =
        at::tensor({std::isfinite(local) ? local : 0.0, std::isfinite(local) ? 0.0 : 1.0, stop_requested() ? 1.0 : 0.0},
                   at::kDouble);
    control->allreduce(agreed, comm::ReduceOp::Sum);
    end_phase(t.comm, "exposed comm", t0);
    // A signal during the last step just lets the run finish (its at_end checkpoint and evaluation).
    signalled = agreed[2].item<double>() > 0 && step + 1 < s.steps;
    stopping = signalled || (s.stop_at > 0 && step + 1 == s.stop_at && s.stop_at < s.steps);
    t0 = Clock::now();
    const double max_norm = s.clip > 0 ? s.clip : std::numeric_limits<double>::infinity();
    if (!sharded) grad_norm = parallel::clip_grad_norm(parameters, max_norm);
    const bool bad = agreed[1].item<double>() > 0 || !std::isfinite(grad_norm);
    if (bad) {
      // The statistics of a non-finite forward are dropped too (on every rank: the same values).
      for (size_t i = 0; i < float_buffers.size(); ++i) float_buffers[i].detach().copy_(buffers_before[i]);
    } else {
      // BatchNorm running statistics: each rank's own batches moved them; one model again.
      parallel::average_buffers(*grad_comm, *model);
    }
    if (bad) {
      ++bad_total;
      ++bad_in_a_row;
      if (rt.rank() == 0)
        spdlog::warn("step {}: non-finite {} ({} bad step(s) in a row, {} in all): update skipped on every rank", step,
                     agreed[1].item<double>() > 0
                         ? "loss on " + std::to_string(int(agreed[1].item<double>())) + " rank(s)"
                         : "gradient norm (" + std::to_string(grad_norm) + ")",
                     bad_in_a_row, bad_total);
      if (bad_in_a_row >= s.max_bad_steps)
        throw TrainingError("training stopped at step " + std::to_string(step) + ": " + std::to_string(bad_in_a_row) +
                            " steps in a row had a non-finite loss or gradient norm (train.max_bad_steps = " +
                            std::to_string(s.max_bad_steps) +
                            "); lower optim.lr, keep optim.clip on, use precision float32, or check the data");
    } else {
      bad_in_a_row = 0;
      if (sharded) {
        sharded->set_lr(learning_rate(s, step));
        // As clip_grad_norm: scaled by max_norm / (norm + 1e-6) when the norm is above max_norm.
        sharded->update(grad_norm > max_norm && grad_norm > 0 ? max_norm / (grad_norm + 1e-6) : 1.0);
      } else if (sgd) {
        sgd->set_lr(learning_rate(s, step));
        sgd->set_momentum(momentum_at(s, step));
        sgd->step();
      } else {
        optimizer->set_lr(learning_rate(s, step));
        optimizer->step();
      }
      if (ema) ema->update();  // applied steps only
    }
    zero_grads();
    end_phase(t.optimizer, "optimizer", t0);
    t.total += since(start);
    t.waited += comm::blocked_seconds() - blocked_before;
    ++step;
    samples_seen += global_batch();
    return bad ? std::nan("") : agreed[0].item<double>() / rt.size();
  }

  Metrics evaluate() {
    const auto t0 = Clock::now();
    model->eval();
    Metrics m;
    {
      at::NoGradGuard no_grad;               // float32 even with precision bf16: the same numbers as `meridian eval`
      std::optional<Ema::Swap> ema_weights;  // the EMA in the model while evaluating, then the training weights back
      if (ema) ema_weights.emplace(*ema);
      if (sharded) sharded->gather_outside_blocks();  // ZeRO-3 (blocks gather themselves)
      m = task.evaluate();
      if (sharded) sharded->release_all();
    }
    model->train();
    if (rt.rank() == 0 && !m.empty()) {
      std::string line;
      for (const auto& [name, value] : m) line += fmt::format("  {} {:.4g}", name, value);
      clear_bar();
      spdlog::info("eval at step {} ({:.1f} s):{}", step, since(t0), line);
      if (files) files->write(step, "eval", m);
    }
    return m;
  }

  void clear_bar() {
    if (bar) std::fputs("\r\033[K", stdout);
  }

  void show_bar(double loss, double samples_per_s, double eta_s) {
    const int width = 24, filled = int(width * double(step) / double(s.steps));
    std::printf("\r\033[K%s [%s%s] %ld/%ld  loss %.4f  %.1f samples/s  ETA %s", task.name().c_str(),
                std::string(filled, '=').c_str(), std::string(width - filled, ' ').c_str(), long(step), long(s.steps),
                loss, samples_per_s, duration_text(eta_s).c_str());
    std::fflush(stdout);
  }

  TrainSummary run() {
    TrainSummary summary;
    summary.parameters = parameter_count;
    if (s.stop_at > 0 && step >= s.stop_at && s.stop_at < s.steps) {
      if (rt.rank() == 0)
        spdlog::info("train.stop_at {} already reached (resumed at step {}): nothing to do", s.stop_at, step);
      summary.stopped = true;
      return summary;
    }
    if (s.eval_at_start && step == 0) summary.first_eval = evaluate();
    StepTimes measured, interval;  // measured: every step after the first; interval: since the last log line
    int64_t measured_steps = 0, interval_steps = 0;
    auto interval_start = Clock::now(), last_bar = Clock::now() - std::chrono::seconds(1);
    double grad_norm = 0;
    const int64_t first = step;
    // Rank 0: the bar, and every log_every steps (and the last) a line, metrics.csv and TensorBoard.
    auto report = [&](double loss, bool last) {
      const double elapsed = since(interval_start);
      const double samples_per_s = double(interval_steps * global_batch()) / std::max(elapsed, 1e-9);
      if (bar && (since(last_bar) > 0.25 || last)) {
        show_bar(loss, samples_per_s, double(s.steps - step) * elapsed / double(interval_steps));
        last_bar = Clock::now();
      }
      if ((step - 1) % s.log_every == 0 || last) {
        const double n = double(interval_steps);
        Metrics m{{"loss", loss},
                  {"lr", learning_rate(s, step - 1)},
                  {"grad_norm", grad_norm},
                  {"samples_per_s", samples_per_s},
                  {"samples_per_s_per_rank", samples_per_s / rt.size()},
                  {"data_s", interval.data / n},
                  {"forward_s", interval.forward / n},
                  {"backward_s", interval.backward / n},
                  {"comm_s", interval.comm / n},
                  {"optimizer_s", interval.optimizer / n},
                  {"step_s", interval.total / n},
                  {"bad_steps", double(bad_total)}};
        std::string extra;  // tokens/s and MFU where they apply
        if (task.tokens_per_sample() > 0) {
          const double tokens_per_s = samples_per_s * task.tokens_per_sample();
          m.push_back({"tokens_per_s", tokens_per_s});
          m.push_back({"tokens_per_s_per_rank", tokens_per_s / rt.size()});
          extra += fmt::format("  {:.0f} tokens/s ({:.0f} per rank)", tokens_per_s, tokens_per_s / rt.size());
        }
        if (s.peak_flops > 0) {
          // Model FLOPs (3 x forward: forward + backward) over the peak of every rank's device.
          const double mfu = 3 * task.flops_per_sample() * samples_per_s / (s.peak_flops * rt.size());
          m.push_back({"mfu", mfu});
          extra += fmt::format("  MFU {:.1f}%", 100 * mfu);
        }
        if (sgd) m.push_back({"momentum", momentum_at(s, step - 1)});
        for (const auto& kv : task.step_metrics()) m.push_back(kv);
        if (files) files->write(step, "train", m);
        if (!bar || last) {
          clear_bar();
          spdlog::info(
              "step {:>6}/{}  loss {:.4f}  lr {:.2e}  |g| {:.3g}  {:.1f} samples/s{}  step {:.0f} ms (data {:.0f}, "
              "fwd {:.0f}, bwd {:.0f}, comm {:.0f}, opt {:.0f}){}",
              step, s.steps, loss, learning_rate(s, step - 1), grad_norm, samples_per_s, extra,
              1e3 * interval.total / n, 1e3 * interval.data / n, 1e3 * interval.forward / n,
              1e3 * interval.backward / n, 1e3 * interval.comm / n, 1e3 * interval.optimizer / n,
              bad_total ? fmt::format("  bad steps {}", bad_total) : "");
        }
        interval = StepTimes{};
        interval_steps = 0;
        interval_start = Clock::now();
      }
    };
    while (step < s.steps) {
      StepTimes t;
      const double loss = train_step(t, grad_norm);
      summary.losses.push_back(loss);
      if (step > first + 1) measured += t, ++measured_steps;  // the first step warms up (allocations, caches)
      if (step == std::min(first + 3, s.steps)) report_peak_memory(step - first);
      interval += t, ++interval_steps;
      if (health) {
        // Waiting for other ranks, wherever it was (NCCL's waits don't block the host: then the
        // exposed communication after backward is the measure).
        health->record({t.total, t.data, std::max(t.comm, t.waited)});
        if (step % s.health_every == 0)
          for (auto& w : health->report(step)) summary.health_warnings.push_back(std::move(w));
      }
      const bool last = step == s.steps;
      const auto aside = Clock::now();  // checkpoints and evaluations are not training throughput
      for (auto& hook : hooks) hook(*o_trainer, StepEvent{step, last, stopping});
      if (s.eval_every > 0 && step % s.eval_every == 0 && !last) summary.last_eval = evaluate();
      interval_start += Clock::now() - aside;
      if (rt.rank() == 0) report(loss, last || stopping);
      if (stopping) break;
    }
    if (stopping) {
      if (rt.rank() == 0) {
        if (signalled)
          spdlog::warn("stopped at step {} on request (SIGTERM/SIGUSR1)", step);
        else
          spdlog::info("stopped at step {} (train.stop_at)", step);
      }
      summary.stopped = true;
      summary.signalled = signalled;
      summary.bad_steps = bad_total;
      return summary;
    }
    summary.bad_steps = bad_total;
    summarise_times(summary, measured, measured_steps);
    if (trace) {
      std::vector<std::string> events;  // streamed: a long run's traces may pass gather's 2 GiB
      rt.stream_to_root(trace->events_json(), [&](int, const std::string& e) { events.push_back(e); });
      if (rt.rank() == 0) {
        core::Trace::write(o.trace_path, events);
        spdlog::info("trace of {} ranks written to {}", rt.size(), o.trace_path);
      }
    }
    summary.last_eval = evaluate();
    return summary;
  }

  // Mean over measured steps and ranks, and the slowest rank's mean, per phase.
  void summarise_times(TrainSummary& summary, const StepTimes& t, int64_t steps) {
    const double n = double(std::max<int64_t>(steps, 1));
    auto mean =
        at::tensor({t.data / n, t.forward / n, t.backward / n, t.comm / n, t.optimizer / n, t.total / n}, at::kDouble);
    auto slowest = mean.clone();
    control->allreduce(mean, comm::ReduceOp::Avg);
    control->allreduce(slowest, comm::ReduceOp::Max);
    auto unpack = [](const at::Tensor& v) {
      auto a = v.accessor<double, 1>();
      return StepTimes{a[0], a[1], a[2], a[3], a[4], a[5]};
    };
    summary.mean_times = unpack(mean);
    summary.max_times = unpack(slowest);
    if (steps > 0 && summary.mean_times.total > 0) {
      summary.samples_per_s = double(global_batch()) / summary.max_times.total;
      summary.model_flops_per_s = 3 * task.flops_per_sample() * summary.samples_per_s;
    }
  }

  Trainer* o_trainer = nullptr;  // the owner, passed to hooks
};

Trainer::Trainer(const comm::Runtime& runtime, Task& task, const TrainerSettings& settings,
                 const TrainerOptions& options)
    : impl_(std::make_unique<Impl>(runtime, task, settings, options)) {
  impl_->o_trainer = this;
}
Trainer::~Trainer() = default;
TrainSummary Trainer::run() { return impl_->run(); }
void Trainer::add_step_hook(StepHook hook) { impl_->hooks.push_back(std::move(hook)); }
int64_t Trainer::step() const { return impl_->step; }
TrainerState Trainer::state() const {
  return {impl_->step, impl_->bad_total, impl_->bad_in_a_row, impl_->samples_seen};
}
void Trainer::set_state(const TrainerState& state) {
  impl_->step = state.step;
  impl_->samples_seen = state.samples_seen;
  impl_->bad_total = state.bad_steps;
  impl_->bad_in_a_row = state.bad_in_a_row;
}
int64_t Trainer::global_batch() const { return impl_->global_batch(); }
AdamW* Trainer::adamw() { return impl_->optimizer.get(); }
ShardedAdamW* Trainer::sharded_adamw() { return impl_->sharded.get(); }
SGD* Trainer::sgd() { return impl_->sgd.get(); }
Ema* Trainer::ema() { return impl_->ema.get(); }
Task& Trainer::task() { return impl_->task; }

}  // namespace meridian::train
