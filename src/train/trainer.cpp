#include "meridian/train/trainer.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <limits>
#include <optional>
#include <thread>

#include "balance_watch.h"
#include "best.h"
#include "health_watch.h"
#include "meridian/comm/communicator.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/trace.h"
#include "meridian/nn/autocast.h"
#include "meridian/ops/facts.h"
#include "meridian/parallel/ddp.h"
#include "meridian/train/strategy_plan.h"
#include "peak_memory.h"
#include "process.h"
#include "progress.h"
#include "run_summary.h"
#include "sample_record.h"
#include "sync_count.h"

namespace meridian::train {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

struct Trainer::Impl {
  const comm::Runtime& rt;
  Task& task;
  TrainerSettings s;
  TrainerOptions o;
  std::shared_ptr<torch::nn::Module> model;
  std::vector<at::Tensor> float_buffers;  // BatchNorm statistics and the like: put back after a skipped step
  std::unique_ptr<comm::Communicator> grad_comm, control;  // control: losses, flags, timings (CPU, MPI)
  std::unique_ptr<Strategy> strategy;                      // how gradients are reduced and parameters updated
  std::unique_ptr<Ema> ema;                                // train.ema > 0
  std::unique_ptr<core::Trace> trace;                      // options.trace_path set
  std::unique_ptr<Reporter> reporter;
  Balancer balancer;                                 // each rank's share of the global batch (train.balance)
  std::vector<std::unique_ptr<Observer>> observers;  // observer.h; the trainer's own first
  BestJudge* best = nullptr;                         // among them: checkpoint.best and train.patience
  int64_t step = 0, bad_in_a_row = 0, bad_total = 0, samples_seen = 0;
  int64_t parameter_count = 0;               // counted before the strategy takes the parameters (it may shard them)
  bool stopping = false, signalled = false;  // agreed this step: the run ends here (stop_at, or a signal on some rank)
  bool said_signal = false;                  // this rank logged the signal it got

  Impl(const comm::Runtime& runtime, Task& t, const TrainerSettings& settings, const TrainerOptions& options)
      : rt(runtime),
        task(t),
        s(settings),
        o(options),
        model(t.model()),
        balancer(rt.rank(), rt.size(), t.batch_size(), settings, options.config) {
    for (const auto& b : model->buffers())
      if (b.is_floating_point()) float_buffers.push_back(b);
    keep_freed_memory();
    grad_comm = comm::make_communicator(rt, comm::default_backend(rt));
    control = comm::make_communicator(rt, comm::Backend::MPI);
    if (s.activation_checkpointing) {
      if (!task.blocks())
        throw ConfigError(o.config.source("train.activation_checkpointing"), "train.activation_checkpointing",
                          "task " + task.name() + " has no blocks to recompute");
      task.blocks()->set_checkpointing(true);
    }
    auto groups = parameter_groups(task, s.weight_decay);
    int64_t decayed = 0, plain = 0;  // before the strategy takes them
    for (const auto& p : groups[0].params) decayed += p.numel();
    for (const auto& p : groups[1].params) plain += p.numel();
    parameter_count = decayed + plain;
    const size_t decayed_tensors = groups[0].params.size(), plain_tensors = groups[1].params.size();
    strategy = make_strategy(rt, *grad_comm, task, std::move(groups), s);
    task.assign_weights(*strategy);  // a model built without values: its weights into the shards
    return_freed_memory();           // what building, loading and sharding freed
    // After the broadcast: every rank starts its EMA from the same weights.
    if (s.ema > 0) ema = std::make_unique<Ema>(*model, s.ema, s.ema_tau);
    if (!o.trace_path.empty()) {
      trace = std::make_unique<core::Trace>(rt.rank());
      strategy->set_trace(trace.get());
    }
    // What watches the loop, in the order it is called (SyncCount first: it ends the step's count).
    if (o.count_syncs) observers.push_back(std::make_unique<SyncCount>(*control, rt.device().is_cuda()));
    if (s.record_samples)
      observers.push_back(std::make_unique<SampleRecord>(rt, *control, task, balancer, o.run_dir, o.config));
    observers.push_back(std::make_unique<PeakMemory>(rt, *control, *strategy, s.steps));
    observers.push_back(std::make_unique<BalanceWatch>(rt.rank(), *control, task, balancer, s, global_batch()));
    if (s.health_every > 0)
      observers.push_back(std::make_unique<HealthWatch>(rt, *control, o.run_dir, s.health_every, balancer));
    observers.push_back(std::make_unique<RunSummary>(rt, *control, task, global_batch(), trace.get(), o.trace_path));
    auto judge = std::make_unique<BestJudge>(rt.rank(), o.best, s.patience);
    best = judge.get();
    observers.push_back(std::move(judge));
    if (rt.rank() == 0) spdlog::info("resolved config ({}):\n{}", o.config.origin(), o.config.dump());
    reporter = std::make_unique<Reporter>(rt.rank(), rt.size(), global_batch(), task, s, o);
    spdlog::info("device {}", rt.device_why());
    const std::string threads = rt.thread_choice().why + (rt.mpi_waits().empty() ? "" : "; " + rt.mpi_waits());
    if (rt.thread_choice().crowded || rt.thread_choice().oversubscribed)
      spdlog::warn("intra-op threads {}", threads);
    else
      spdlog::info("intra-op threads {}", threads);
    if (rt.rank() != 0) return;
    spdlog::info(
        "{}: {:.2f}M trained parameters ({} tensors with weight decay {}, {} without: {} values), {:.3f} GFLOP per "
        "sample forward; {} ranks ({} node{}) x batch {} x accumulate {} = {} samples per step; {} steps; {}",
        task.name(), parameter_count / 1e6, decayed_tensors, s.weight_decay, plain_tensors, plain,
        task.flops_per_sample() / 1e9, rt.size(), rt.node_count(), rt.node_count() == 1 ? "" : "s", task.batch_size(),
        s.accumulate, global_batch(), s.steps,
        s.precision == Precision::Float32 ? std::string("float32")
                                          : precision_name(s.precision) + std::string(" autocast"));
    spdlog::info("{}", strategy->describe());
    if (s.activation_checkpointing) spdlog::info("activations: recomputed block by block in backward");
    if (s.balance)
      spdlog::info(
          "train.balance auto: shares of each micro-batch follow each rank's measured speed, every {} steps, within "
          "[1, {}] samples, when the predicted step time falls by more than {:.0f} %",
          s.balance_every, balancer.max_share(), 100 * s.balance_threshold);
    if (ema) spdlog::info("model EMA: decay {} (tau {} updates); evaluations use the EMA weights", s.ema, s.ema_tau);
    if (s.precision == Precision::BFloat16 && rt.device().is_cpu() && !ops::cpu_has_native_bf16())
      spdlog::warn(
          "train.precision bf16: this CPU has no native bfloat16 (avx512_bf16/amx_bf16); expect it to be slow");
    if (s.precision == Precision::Float16 && rt.device().is_cpu())
      spdlog::warn("train.precision fp16 on a CPU: float16 is the GPUs' (V100, T4); on a CPU expect it to be slow");
    if (const LossScaler* scaler = strategy->loss_scaler()) spdlog::info("fp16: {}", scaler->describe());
  }

  int64_t global_batch() const { return task.batch_size() * s.accumulate * rt.size(); }

  // A phase that started at t0 ends now: its seconds added to `total`, and its span to the trace.
  void end_phase(double& total, const char* phase, Clock::time_point t0) {
    const auto now = Clock::now();
    total += std::chrono::duration<double>(now - t0).count();
    if (trace) trace->span(phase, "step", t0, now, "compute");
  }

  // --inject-straggler: this rank made slow by `seconds` on purpose.
  void maybe_stall(double seconds) const {
    if (seconds > 0 && o.straggler.rank == rt.rank())
      std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  }

  // One optimizer step; returns the mean loss over ranks (NaN when the step was skipped).
  double train_step(StepTimes& t, double& grad_norm) {
    const auto start = Clock::now();
    const double blocked_before = comm::blocked_seconds();
    // Floating-point buffers (BatchNorm statistics) as they were: a skipped step puts them back.
    std::vector<at::Tensor> buffers_before;
    for (const auto& b : float_buffers) buffers_before.push_back(b.detach().clone());
    // On the device: read once, with the gradient norm, after the last micro-step.
    at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(rt.device()));
    strategy->begin_step(step);
    for (int64_t micro = 0; micro < s.accumulate; ++micro) {
      strategy->begin_micro_step(micro + 1 == s.accumulate);
      auto t0 = Clock::now();
      task.next_batch();
      for (auto& obs : observers) obs->on_batch(micro);
      maybe_stall(o.straggler.data_s);
      end_phase(t.data, "data", t0);
      t0 = Clock::now();
      at::Tensor loss;
      {
        nn::AutocastScope autocast(rt.device().type(), compute_dtype(s.precision));
        strategy->begin_forward();
        loss = task.forward();
      }
      maybe_stall(o.straggler.compute_s);
      if (s.accumulate > 1) loss = loss / double(s.accumulate);
      end_phase(t.forward, "forward", t0);
      t0 = Clock::now();
      strategy->backward(loss);
      loss_sum += loss.detach().to(at::kDouble);
      end_phase(t.backward, "backward", t0);
      t0 = Clock::now();
      strategy->end_backward();
      end_phase(t.comm, "exposed comm", t0);
    }
    auto t0 = Clock::now();
    strategy->reduce_gradients();
    // The step's one host read (on a GPU its one wait for the device): this rank's loss and the
    // global gradient norm together.
    const at::Tensor read = at::stack({loss_sum, strategy->grad_norm().to(loss_sum.device())}).cpu();
    const double local = read[0].item<double>();
    grad_norm = read[1].item<double>();
    // Every rank learns whether any rank's loss was not finite, whether any rank was asked to stop,
    // and the mean loss (over MPI, on the host). Each rank says in its log when it got the signal.
    if (stop_requested() && !said_signal) {
      said_signal = true;
      spdlog::warn("rank {} received {}: the ranks stop after this step, with a checkpoint", rt.rank(),
                   stop_signal() == SIGTERM ? "SIGTERM" : "SIGUSR1");
    }
    auto agreed =
        at::tensor({std::isfinite(local) ? local : 0.0, std::isfinite(local) ? 0.0 : 1.0, stop_requested() ? 1.0 : 0.0},
                   at::kDouble);
    control->allreduce(agreed, comm::ReduceOp::Sum);
    end_phase(t.comm, "exposed comm", t0);
    // A signal during the last step just lets the run finish (its at_end checkpoint and evaluation).
    signalled = agreed[2].item<double>() > 0 && step + 1 < s.steps;
    stopping = signalled || (s.stop_at > 0 && step + 1 == s.stop_at && s.stop_at < s.steps);
    t0 = Clock::now();
    const double bad_losses = agreed[1].item<double>();
    // Non-finite gradients of a finite loss are the loss scaler's to skip (fp16), else the guard's.
    const bool bad = bad_losses > 0 || (!std::isfinite(grad_norm) && !strategy->loss_scaler());
    if (bad) {
      // The statistics of a non-finite forward are dropped too (on every rank: the same values).
      for (size_t i = 0; i < float_buffers.size(); ++i) float_buffers[i].detach().copy_(buffers_before[i]);
      skip_bad_step(bad_losses, grad_norm);
    } else {
      // BatchNorm running statistics: each rank's own batches moved them; one model again.
      parallel::average_buffers(*grad_comm, *model);
      bad_in_a_row = 0;
      const double max_norm = s.clip > 0 ? s.clip : std::numeric_limits<double>::infinity();
      if (strategy->apply(grad_norm, max_norm, step) && ema) ema->update();  // applied steps only
    }
    strategy->zero_grad();
    end_phase(t.optimizer, "optimizer", t0);
    t.total += since(start);
    t.waited += comm::blocked_seconds() - blocked_before;
    ++step;
    samples_seen += global_batch();
    return bad ? std::nan("") : agreed[0].item<double>() / rt.size();
  }

  // The NaN/Inf guard: the step is counted and skipped; max_bad_steps in a row stop the job.
  void skip_bad_step(double bad_losses, double grad_norm) {
    ++bad_total;
    ++bad_in_a_row;
    if (rt.rank() == 0)
      spdlog::warn("step {}: non-finite {} ({} bad step(s) in a row, {} in all): update skipped on every rank", step,
                   bad_losses > 0 ? "loss on " + std::to_string(int(bad_losses)) + " rank(s)"
                                  : "gradient norm (" + std::to_string(grad_norm) + ")",
                   bad_in_a_row, bad_total);
    if (bad_in_a_row >= s.max_bad_steps)
      throw TrainingError("training stopped at step " + std::to_string(step) + ": " + std::to_string(bad_in_a_row) +
                          " steps in a row had a non-finite loss or gradient norm (train.max_bad_steps = " +
                          std::to_string(s.max_bad_steps) +
                          "); lower optim.lr, keep optim.clip on, use precision float32, or check the data");
  }

  Metrics evaluate() {
    const auto t0 = Clock::now();
    model->eval();
    Metrics m;
    {
      at::NoGradGuard no_grad;
      // bf16 with precision bf16, as `meridian eval` of the checkpoint: the same numbers
      nn::AutocastScope autocast(rt.device().type(), compute_dtype(s.precision));
      std::optional<Ema::Swap> ema_weights;  // the EMA in the model while evaluating, then the training weights back
      if (ema) ema_weights.emplace(*ema);
      strategy->begin_eval();
      m = task.evaluate();
      strategy->end_eval();
    }
    model->train();
    reporter->evaluation(step, since(t0), m);
    return m;
  }

  // The loop: each step, then what watches it at its fixed points (observer.h).
  TrainSummary run() {
    TrainSummary summary;
    summary.parameters = parameter_count;
    summary.peak_flops = s.peak_flops;
    if (s.stop_at > 0 && step >= s.stop_at && s.stop_at < s.steps) {
      if (rt.rank() == 0)
        spdlog::info("train.stop_at {} already reached (resumed at step {}): nothing to do", s.stop_at, step);
      summary.stopped = true;
      return summary;
    }
    LoopControl begin;
    for (auto& obs : observers) obs->on_run_begin(step, begin);
    if (begin.stop) {
      if (rt.rank() == 0) spdlog::info("{} (resumed at step {}): nothing to do", begin.why, step);
      summary.early_stop = begin.why;
    } else if (s.eval_at_start && step == 0) {
      summary.first_eval = evaluate();
    }
    while (step < s.steps && !begin.stop) {
      for (auto& obs : observers) obs->on_step_begin(step);
      StepTimes t;
      double grad_norm = 0;
      const double loss = train_step(t, grad_norm);
      summary.losses.push_back(loss);
      reporter->record(t);
      StepEvent event{step, step == s.steps, stopping};
      LoopControl control;
      for (auto& obs : observers) obs->on_step_end(event, {loss, grad_norm, t}, control);
      const auto aside = Clock::now();  // evaluations and checkpoints are not training throughput
      const auto end_early = [&] {      // an observer's stop before the last step: this one is the last
        if (!control.stop || event.last) return;
        if (rt.rank() == 0) spdlog::info("{}", control.why);
        summary.early_stop = control.why;
        event.last = true;  // the end of the run: its evaluation and at_end checkpoint
      };
      end_early();
      // The evaluation first, so that the step's checkpoint holds its best record.
      if (control.evaluate || evaluation_due(event.last)) {
        event.evaluated = true;
        summary.last_eval = evaluate();
        for (auto& obs : observers) obs->on_evaluate(event, summary.last_eval, control);
        event.best = control.best;
        end_early();
      }
      event.save = control.save;
      for (auto& obs : observers) obs->on_save(event);
      reporter->exclude(Clock::now() - aside);
      reporter->step(step, loss, grad_norm, bad_total, event.last || stopping, [&] {
        Metrics m = strategy->step_metrics(step - 1);
        for (auto& kv : task.step_metrics()) m.push_back(std::move(kv));
        for (auto& obs : observers) obs->on_log(m);
        return m;
      });
      if (stopping || event.last) break;
    }
    summary.bad_steps = bad_total;
    if (const LossScaler* scaler = strategy->loss_scaler()) summary.scale_skips = scaler->skipped();
    summary.stopped = stopping;
    summary.signalled = signalled;
    if (stopping && rt.rank() == 0) {
      if (signalled)
        spdlog::warn("stopped at step {} on request (SIGTERM/SIGUSR1)", step);
      else
        spdlog::info("stopped at step {} (train.stop_at)", step);
    }
    for (auto& obs : observers) obs->on_run_end(summary);
    return summary;
  }

  // An evaluation after this step: every train.eval_every steps, when every train.eval_every_epochs
  // epochs of the data end (steps x accumulate global batches of batches_per_epoch each), and after
  // the last step.
  bool evaluation_due(bool last) const {
    if (last) return true;
    if (s.eval_every > 0 && step % s.eval_every == 0) return true;
    if (s.eval_every_epochs <= 0) return false;
    const int64_t per_epoch = task.batches_per_epoch();
    if (per_epoch <= 0) return false;
    const int64_t epochs = step * s.accumulate / per_epoch, before = (step - 1) * s.accumulate / per_epoch;
    return epochs > before && epochs % s.eval_every_epochs == 0;
  }
};

// An observer of on_save alone (Trainer::add_step_hook).
class HookObserver : public Observer {
 public:
  HookObserver(Trainer& trainer, Trainer::StepHook hook) : trainer_(trainer), hook_(std::move(hook)) {}
  void on_save(const StepEvent& event) override { hook_(trainer_, event); }

 private:
  Trainer& trainer_;
  Trainer::StepHook hook_;
};

Trainer::Trainer(const comm::Runtime& runtime, Task& task, const TrainerSettings& settings,
                 const TrainerOptions& options)
    : impl_(std::make_unique<Impl>(runtime, task, settings, options)) {}
Trainer::~Trainer() = default;
TrainSummary Trainer::run() { return impl_->run(); }
void Trainer::add_observer(std::unique_ptr<Observer> observer) { impl_->observers.push_back(std::move(observer)); }
void Trainer::add_step_hook(StepHook hook) { add_observer(std::make_unique<HookObserver>(*this, std::move(hook))); }
int64_t Trainer::step() const { return impl_->step; }
TrainerState Trainer::state() const {
  return {impl_->step,         impl_->bad_total,      impl_->bad_in_a_row,
          impl_->samples_seen, impl_->best->record(), impl_->balancer.state()};
}
void Trainer::set_state(const TrainerState& state) {
  impl_->step = state.step;
  impl_->best->set_record(state.best);
  impl_->samples_seen = state.samples_seen;
  impl_->bad_total = state.bad_steps;
  impl_->bad_in_a_row = state.bad_in_a_row;
  if (!impl_->balancer.set_state(state.balance) && impl_->rt.rank() == 0 && !state.balance.shares.empty())
    spdlog::info("the checkpoint's batch shares were for {} ranks and another batch or world size: even shares{}",
                 state.balance.shares.size(), impl_->s.balance ? ", measured again (train.balance auto)" : "");
}
int64_t Trainer::global_batch() const { return impl_->global_batch(); }
Strategy& Trainer::strategy() { return *impl_->strategy; }
Ema* Trainer::ema() { return impl_->ema.get(); }
Task& Trainer::task() { return impl_->task; }

}  // namespace meridian::train
