#include "meridian/train/trainer.h"

#include <ATen/autocast_mode.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "meridian/comm/communicator.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/trace.h"
#include "meridian/nn/autocast.h"
#include "meridian/ops/facts.h"
#include "meridian/ops/health.h"
#include "meridian/parallel/ddp.h"
#include "meridian/train/balance.h"
#include "process.h"
#include "progress.h"

namespace meridian::train {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// TrainerOptions::count_syncs: for one step, LibTorch's CUDA sync debug mode warns at every host wait
// for the GPU (.item(), a blocking copy, nonzero, a stream synchronize); this handler counts those
// warnings instead of printing them and passes any other warning on.
class SyncCounter : public c10::WarningHandler {
 public:
  SyncCounter() : previous_(c10::WarningUtils::get_warning_handler()), guard_(this) {
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
  }
  ~SyncCounter() override { c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED); }
  void process(const c10::Warning& warning) override {
    if (warning.msg().find("synchronizing CUDA operation") != std::string::npos)
      ++count;
    else
      previous_->process(warning);
  }
  int64_t count = 0;

 private:
  c10::WarningHandler* previous_;
  c10::WarningUtils::WarningHandlerGuard guard_;
};

// The stretches of steps at one set of shares, each without its first step (after a change: the
// batches read again) and without the run's warm-up step; the longest is kept.
class Stretches {
 public:
  struct Stretch {
    int64_t first = 0, last = -1;  // steps; empty when last < first
    double seconds = 0;            // this rank's whole step time over them
    int64_t steps() const { return last - first + 1; }
  };
  // After step `step` (measured: not the warm-up), which took `seconds`; `changed`: the shares
  // change after it.
  void add(int64_t step, double seconds, bool measured, bool changed) {
    if (measured && !after_change_) {
      if (now_.steps() <= 0) now_.first = step;
      now_.last = step, now_.seconds += seconds;
    }
    after_change_ = changed;
    if (changed) close();
  }
  Stretch longest() {
    close();
    return longest_;
  }

 private:
  void close() {
    if (now_.steps() > longest_.steps()) longest_ = now_;
    now_ = {};
  }
  Stretch now_, longest_;
  bool after_change_ = false;
};

}  // namespace

void Task::set_shares(const std::vector<int64_t>& shares) {
  if (!shares.empty())
    throw std::logic_error("task " + name() + " cannot split its batches unevenly (train.balance needs it)");
}

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
  std::unique_ptr<ops::HealthMonitor> health;              // every rank, when train.health_every > 0
  std::unique_ptr<Reporter> reporter;
  Balancer balancer;  // each rank's share of the global batch (train.balance)
  std::vector<StepHook> hooks;
  int64_t step = 0, bad_in_a_row = 0, bad_total = 0, samples_seen = 0;
  BestRecord best;
  int64_t parameter_count = 0;               // counted before the strategy takes the parameters (it may shard them)
  bool stopping = false, signalled = false;  // agreed this step: the run ends here (stop_at, or a signal on some rank)
  bool said_signal = false;                  // this rank logged the signal it got
  // train.record_samples: this step's (epoch, rows) per micro-batch, and rank 0's RUN_DIR/samples.jsonl.
  std::vector<std::pair<int64_t, at::Tensor>> step_rows;
  std::ofstream samples;

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
    if (s.health_every > 0) health = std::make_unique<ops::HealthMonitor>(rt, *control, o.run_dir);
    if (!o.trace_path.empty()) {
      trace = std::make_unique<core::Trace>(rt.rank());
      strategy->set_trace(trace.get());
    }
    if (s.record_samples && o.run_dir.empty())
      throw ConfigError(o.config.source("train.record_samples"), "train.record_samples",
                        "the sample record is written to RUN_DIR/samples.jsonl: give --run-dir");
    if (rt.rank() == 0) spdlog::info("resolved config ({}):\n{}", o.config.origin(), o.config.dump());
    reporter = std::make_unique<Reporter>(rt.rank(), rt.size(), global_batch(), task, s, o);
    if (s.record_samples && rt.rank() == 0) {
      samples.open(o.run_dir + "/samples.jsonl", std::ios::app);
      if (!samples) throw SystemError("cannot open '" + o.run_dir + "/samples.jsonl' for writing");
    }
    spdlog::info("device {}", rt.device_why());
    if (rt.thread_choice().crowded)
      spdlog::warn("intra-op threads {}", rt.thread_choice().why);
    else
      spdlog::info("intra-op threads {}", rt.thread_choice().why);
    if (rt.rank() != 0) return;
    spdlog::info(
        "{}: {:.2f}M trained parameters ({} tensors with weight decay {}, {} without: {} values), {:.3f} GFLOP per "
        "sample forward; {} ranks ({} node{}) x batch {} x accumulate {} = {} samples per step; {} steps; {}",
        task.name(), parameter_count / 1e6, decayed_tensors, s.weight_decay, plain_tensors, plain,
        task.flops_per_sample() / 1e9, rt.size(), rt.node_count(), rt.node_count() == 1 ? "" : "s", task.batch_size(),
        s.accumulate, global_batch(), s.steps, s.precision == Precision::BFloat16 ? "bf16 autocast" : "float32");
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
  }

  // Collective: every rank's peak memory so far, logged by rank 0 next to the strategy's closed form:
  // on a GPU the device memory LibTorch's allocator has held at most (tensors: activations, weights,
  // optimizer state, the batch), on the CPU the resident memory (getrusage: the whole process,
  // LibTorch and the batch included).
  void report_peak_memory(int64_t steps) {
    double mine = 0;
    if (rt.device().is_cuda()) {
      const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(rt.device().index());
      mine = double(stats.allocated_bytes[size_t(c10::CachingAllocator::StatType::AGGREGATE)].peak);
    } else {
      struct rusage usage {};
      getrusage(RUSAGE_SELF, &usage);
      mine = double(usage.ru_maxrss) * 1024;  // KiB on Linux
    }
    at::Tensor peaks = at::tensor({mine, -mine}, at::kDouble);
    control->allreduce(peaks, comm::ReduceOp::Max);
    const auto closed_form = strategy->memory();
    if (rt.rank() != 0 || !closed_form) return;
    const double gib = double(int64_t(1) << 30);
    spdlog::info(
        "memory after {} step(s): peak {} {:.2f} GiB per rank (max over ranks; min {:.2f}); closed form "
        "of optim.zero {}: {:.2f} GiB before activations",
        steps, rt.device().is_cuda() ? "GPU allocated" : "resident", peaks[0].item<double>() / gib,
        -peaks[1].item<double>() / gib, closed_form->stage, double(closed_form->total()) / gib);
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
    for (int64_t micro = 0; micro < s.accumulate; ++micro) {
      strategy->begin_micro_step(micro + 1 == s.accumulate);
      auto t0 = Clock::now();
      task.next_batch();
      if (s.record_samples) step_rows.emplace_back(task.data_position().epoch, task.batch_rows());
      maybe_stall(o.straggler.data_s);
      end_phase(t.data, "data", t0);
      t0 = Clock::now();
      at::Tensor loss;
      {
        nn::AutocastScope autocast(rt.device().type(), s.precision == Precision::BFloat16);
        strategy->begin_forward();
        loss = task.forward();
      }
      maybe_stall(o.straggler.compute_s);
      if (s.accumulate > 1) loss = loss / double(s.accumulate);
      end_phase(t.forward, "forward", t0);
      t0 = Clock::now();
      loss.backward();
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
    strategy->clip(grad_norm, s.clip > 0 ? s.clip : std::numeric_limits<double>::infinity());
    const double bad_losses = agreed[1].item<double>();
    const bool bad = bad_losses > 0 || !std::isfinite(grad_norm);
    if (bad) {
      // The statistics of a non-finite forward are dropped too (on every rank: the same values).
      for (size_t i = 0; i < float_buffers.size(); ++i) float_buffers[i].detach().copy_(buffers_before[i]);
      skip_bad_step(bad_losses, grad_norm);
    } else {
      // BatchNorm running statistics: each rank's own batches moved them; one model again.
      parallel::average_buffers(*grad_comm, *model);
      bad_in_a_row = 0;
      strategy->update(step);
      if (ema) ema->update();  // applied steps only
    }
    strategy->zero_grad();
    end_phase(t.optimizer, "optimizer", t0);
    t.total += since(start);
    t.waited += comm::blocked_seconds() - blocked_before;
    // Busy: what this rank's share cost it, without the optimizer (the same for every share) and
    // without waiting for the others.
    balancer.record(t.total - t.optimizer - t.waited, t.total, balancer.shares()[size_t(rt.rank())] * s.accumulate);
    ++step;
    samples_seen += global_batch();
    if (s.record_samples) record_samples();
    return bad ? std::nan("") : agreed[0].item<double>() / rt.size();
  }

  // Collective (with train.record_samples only: an allreduce over the control communicator, so the
  // watchdog covers it): rank 0 appends the step's rows to samples.jsonl, one line per step:
  // {"step", "world_size", "batches": [{"epoch", "rows"}]}, a micro-batch's rows every rank's in rank
  // order (each rank fills its share's slots of the global micro-batch; the sum is the whole). A
  // resumed run writes the steps after its checkpoint again: the last line of a step is the one that
  // counts.
  void record_samples() {
    const std::vector<int64_t>& shares = balancer.shares();
    int64_t offset = 0, micro = 0;
    for (int r = 0; r < rt.size(); ++r) (r < rt.rank() ? offset : micro) += shares[size_t(r)];
    micro += offset;
    at::Tensor all = at::zeros({int64_t(step_rows.size()), micro}, at::kDouble);
    auto slots = all.accessor<double, 2>();
    for (size_t k = 0; k < step_rows.size(); ++k) {
      const at::Tensor& mine = step_rows[k].second;
      const int64_t n = mine.defined() ? mine.numel() : 0;
      if (n != shares[size_t(rt.rank())])
        throw std::logic_error("train.record_samples: task " + task.name() + " reported " + std::to_string(n) +
                               " rows for a share of " + std::to_string(shares[size_t(rt.rank())]));
      all[int64_t(k)].narrow(0, offset, n).copy_(mine);
    }
    control->allreduce(all, comm::ReduceOp::Sum);
    if (rt.rank() == 0) {
      nlohmann::json batches = nlohmann::json::array();
      for (size_t k = 0; k < step_rows.size(); ++k) {
        std::vector<int64_t> ids(static_cast<size_t>(micro));
        for (int64_t j = 0; j < micro; ++j) ids[size_t(j)] = int64_t(slots[int64_t(k)][j]);
        batches.push_back({{"epoch", step_rows[k].first}, {"rows", std::move(ids)}});
      }
      samples << nlohmann::json{{"step", step}, {"world_size", rt.size()}, {"batches", std::move(batches)}}.dump()
              << '\n';
      samples.flush();
      if (!samples) throw SystemError("cannot write '" + o.run_dir + "/samples.jsonl' (disk full?)");
    }
    step_rows.clear();
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
      nn::AutocastScope autocast(rt.device().type(), s.precision == Precision::BFloat16);
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
    if (const std::string why = patience_exhausted(); !why.empty()) {
      if (rt.rank() == 0) spdlog::info("{} (resumed at step {}): nothing to do", why, step);
      summary.patience_stop = why;
      summary.best = best;
      return summary;
    }
    if (!balancer.even()) apply_shares("from the start");
    if (s.eval_at_start && step == 0) summary.first_eval = evaluate();
    StepTimes measured;  // every step after the first
    int64_t measured_steps = 0;
    Stretches settled;  // train.balance: the longest stretch at one set of shares
    double grad_norm = 0;
    const int64_t first = step;
    int64_t sync_total = 0, sync_max = 0;  // TrainerOptions::count_syncs
    while (step < s.steps) {
      StepTimes t;
      std::optional<SyncCounter> syncs;  // this step's, with TrainerOptions::count_syncs on a GPU
      if (o.count_syncs && rt.device().is_cuda()) syncs.emplace();
      const double loss = train_step(t, grad_norm);
      if (syncs && step > first + 1) sync_total += syncs->count, sync_max = std::max(sync_max, syncs->count);
      syncs.reset();
      summary.losses.push_back(loss);
      if (step > first + 1) measured += t, ++measured_steps;  // the first step warms up (allocations, caches)
      if (step == std::min(first + 3, s.steps)) report_peak_memory(step - first);
      reporter->record(t);
      std::string why;
      const bool changed = balancer.rebalance(*control, step, &why);
      if (changed) apply_shares(fmt::format("at step {}", step), why);
      settled.add(step, t.total, step > first + 1, changed);
      if (health) {
        // Waiting for other ranks, wherever it was (NCCL's waits don't block the host: then the
        // exposed communication after backward is the measure).
        health->record({t.total, t.data, std::max(t.comm, t.waited)});
        if (step % s.health_every == 0)
          for (auto& w : health->report(step, balancing() ? balancer.describe() : ""))
            summary.health_warnings.push_back(std::move(w));
      }
      bool last = step == s.steps;
      const auto aside = Clock::now();  // evaluations and checkpoints are not training throughput
      // The evaluation first, so that the step's checkpoint holds its best record.
      bool improved = false;
      const bool evaluated = evaluation_due(last);
      if (evaluated) {
        summary.last_eval = evaluate();
        improved = judge(summary.last_eval);
        if (!last && !(summary.patience_stop = patience_exhausted()).empty()) {
          if (rt.rank() == 0) spdlog::info("{}", summary.patience_stop);
          last = true;  // the end of the run: its at_end checkpoint
        }
      }
      for (auto& hook : hooks) hook(*owner, StepEvent{step, last, stopping, improved, evaluated});
      reporter->exclude(Clock::now() - aside);
      reporter->step(step, loss, grad_norm, bad_total, last || stopping, [&] {
        Metrics m = strategy->step_metrics(step - 1);
        for (auto& kv : task.step_metrics()) m.push_back(std::move(kv));
        if (balancing())
          for (auto& kv : balancer.metrics()) m.push_back(std::move(kv));
        return m;
      });
      if (stopping || last) break;
    }
    if (o.count_syncs) {  // collective: max over ranks of the mean and of the most (CPU ranks: -1)
      const double counted = double(std::max<int64_t>(1, step - first - 1));
      const bool gpu = rt.device().is_cuda();
      at::Tensor both =
          at::tensor({gpu ? double(sync_total) / counted : -1.0, gpu ? double(sync_max) : -1.0}, at::kDouble);
      control->allreduce(both, comm::ReduceOp::Max);
      summary.host_syncs_per_step = both[0].item<double>();
      summary.host_syncs_max = int64_t(both[1].item<double>());
    }
    summary.bad_steps = bad_total;
    summary.best = best;
    if (stopping) {
      if (rt.rank() == 0) {
        if (signalled)
          spdlog::warn("stopped at step {} on request (SIGTERM/SIGUSR1)", step);
        else
          spdlog::info("stopped at step {} (train.stop_at)", step);
      }
      summary.stopped = true;
      summary.signalled = signalled;
      return summary;
    }
    summarise_times(summary, measured, measured_steps);
    if (s.balance) summarise_stretch(summary, settled.longest());
    if (trace) {
      std::vector<std::string> events;  // streamed: a long run's traces may pass gather's 2 GiB
      rt.stream_to_root(trace->events_json(), [&](int, const std::string& e) { events.push_back(e); });
      if (rt.rank() == 0) {
        core::Trace::write(o.trace_path, events);
        spdlog::info("trace of {} ranks written to {}", rt.size(), o.trace_path);
      }
    }
    return summary;
  }

  // Whether the shares are worth showing: train.balance auto, or shares given.
  bool balancing() const { return s.balance || !balancer.even(); }

  // Every rank: the balancer's shares to the task (its loader reads from the next batch on at them).
  void apply_shares(const std::string& when, const std::string& why = "") {
    task.set_shares(balancer.even() ? std::vector<int64_t>{} : balancer.shares());
    if (rt.rank() == 0) spdlog::info("batch shares {}: {}{}", when, balancer.describe(), why.empty() ? "" : "; " + why);
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

  // Records evaluation `m` against the best so far (TrainerOptions::best); true when it is the new best.
  bool judge(const Metrics& m) {
    if (o.best.metric.empty()) return false;
    const auto it = std::find_if(m.begin(), m.end(), [&](const auto& kv) { return kv.first == o.best.metric; });
    if (it == m.end()) {
      std::string reported;
      for (const auto& kv : m) reported += (reported.empty() ? "" : ", ") + kv.first;
      throw TrainingError("checkpoint.best: the evaluation at step " + std::to_string(step) + " reported no " +
                          o.best.metric + " (it reported: " + (reported.empty() ? "nothing" : reported) +
                          "); name one of these or give data.eval a dataset that has it");
    }
    const double v = it->second;
    const bool better = std::isnan(best.value) || (o.best.maximize ? v > best.value : v < best.value);
    if (better) {
      best = {v, step, 0};
    } else {
      ++best.evals_since;
    }
    if (rt.rank() == 0)
      spdlog::info("checkpoint.best {}: {:.4f} at step {}{}", o.best.metric, v, step,
                   better ? " (the best so far)"
                          : fmt::format("; the best is {:.4f} at step {} ({} evaluation(s) since)", best.value,
                                        best.step, best.evals_since));
    return better;
  }

  // Why train.patience ends the run now ("": it does not).
  std::string patience_exhausted() const {
    if (s.patience <= 0 || best.evals_since < s.patience) return "";
    return fmt::format(
        "stopped at step {}: {} evaluations without a better {} (train.patience {}; the best, {:.4f}, "
        "at step {})",
        step, best.evals_since, o.best.metric, s.patience, best.value, best.step);
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

  // Collective: the stretch's samples/s at the slowest rank's time, and the run's share changes.
  void summarise_stretch(TrainSummary& summary, const Stretches::Stretch& longest) {
    at::Tensor seconds = at::tensor({longest.seconds}, at::kDouble);
    control->allreduce(seconds, comm::ReduceOp::Max);
    summary.share_changes = balancer.changes();
    summary.settled_first = longest.first, summary.settled_last = longest.last;
    const double slowest = seconds.item<double>();
    if (slowest > 0)
      summary.settled_samples_per_s = double(global_batch() * (longest.last - longest.first + 1)) / slowest;
  }

  Trainer* owner = nullptr;  // passed to hooks
};

Trainer::Trainer(const comm::Runtime& runtime, Task& task, const TrainerSettings& settings,
                 const TrainerOptions& options)
    : impl_(std::make_unique<Impl>(runtime, task, settings, options)) {
  impl_->owner = this;
}
Trainer::~Trainer() = default;
TrainSummary Trainer::run() { return impl_->run(); }
void Trainer::add_step_hook(StepHook hook) { impl_->hooks.push_back(std::move(hook)); }
int64_t Trainer::step() const { return impl_->step; }
TrainerState Trainer::state() const {
  return {impl_->step,         impl_->bad_total, impl_->bad_in_a_row,
          impl_->samples_seen, impl_->best,      impl_->balancer.state()};
}
void Trainer::set_state(const TrainerState& state) {
  impl_->step = state.step;
  impl_->best = state.best;
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
