// The data-parallel strategies over DistributedDataParallel (AdamW, SGD), the parameter groups and
// the choice of a strategy (train::make_strategy). ZeRO's is in zero_strategy.cpp.
#include "meridian/train/strategy.h"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include "adamw_state.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/parallel/ddp.h"
#include "meridian/train/trainer.h"
#include "strategies.h"

namespace meridian::train {

void Strategy::zero_grad() {
  at::NoGradGuard no_grad;
  for (auto& g : groups_)
    for (auto& p : g.params)
      if (p.grad().defined()) p.mutable_grad().zero_();
}

void Strategy::backward(const at::Tensor& loss) {
  if (!scaler_) return loss.backward();
  double factor = scaler_->scale();
  if (std::find(overflow_steps_.begin(), overflow_steps_.end(), step_ + 1) != overflow_steps_.end())
    factor *= 0x1p40;  // the test seam's overflow
  (loss * factor).backward();
}

void Strategy::set_loss_scaler(const LossScaleSettings& settings, bool speaks) {
  scaler_.emplace(settings);
  speaks_ = speaks;
  const char* seam = std::getenv("MERIDIAN_TEST_OVERFLOW_STEPS");
  if (!seam || !*seam) return;
  std::stringstream in(seam);
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end || v < 1)
      throw UserError(std::string("MERIDIAN_TEST_OVERFLOW_STEPS: '") + seam +
                      "' is not a list of optimizer steps (1-based, separated by commas)");
    overflow_steps_.push_back(v);
  }
  if (speaks_)
    spdlog::warn("MERIDIAN_TEST_OVERFLOW_STEPS: the scaled loss of step(s) {} x 2^40 (a test's overflow)", seam);
}

bool Strategy::apply(double norm, double max_norm, int64_t step) {
  if (scaler_ && !std::isfinite(norm)) {
    const double before = scaler_->scale();
    scaler_->update(false);
    if (speaks_)
      spdlog::warn("loss scale {:g} -> {:g} at step {}: inf/NaN gradients, step skipped ({} so far)", before,
                   scaler_->scale(), step + 1, scaler_->skipped());
    if (scaler_->skipped_in_a_row() >= LossScaler::kHopeless)  // the same on every rank: the norm is global
      throw TrainingError(fmt::format(
          "training stopped at step {}: {} steps in a row had inf/NaN gradients from a finite loss, down to a loss "
          "scale of {:g}: no scale fixes them (a float16 overflow inside the model, or an op that makes NaN); train "
          "in bf16 (compute capability 8.0+) or float32",
          step + 1, scaler_->skipped_in_a_row(), scaler_->scale()));
    return false;
  }
  clip(norm, max_norm);
  update(step);
  if (scaler_) scaler_->update(true);
  return true;
}

Metrics Strategy::step_metrics(int64_t step) const {
  Metrics m = optimizer_metrics(step);
  if (scaler_) {
    m.push_back({"loss_scale", scaler_->scale()});
    m.push_back({"scale_skips", double(scaler_->skipped())});
  }
  return m;
}

// The scaler's state as three one-element tensors (the same on every rank).
void Strategy::save(StateWriter& w) {
  save_state(w);
  if (!scaler_) return;
  w.replicated("loss_scale/scale", at::tensor({scaler_->scale()}, at::kDouble));
  w.replicated("loss_scale/growth_tracker", at::tensor({scaler_->growth_tracker()}, at::kLong));
  w.replicated("loss_scale/skipped", at::tensor({scaler_->skipped()}, at::kLong));
}

void Strategy::load(StateReader& r) {
  load_state(r);
  if (!scaler_) return;
  if (!r.has("loss_scale/scale")) {
    if (speaks_)
      spdlog::info("{} holds no loss scale (not an fp16 run's): the scale starts at {:g}", r.path(), scaler_->scale());
    return;
  }
  const auto one = [&](const char* name) {
    const at::Tensor t = r.read(std::string("loss_scale/") + name);
    if (t.numel() != 1) throw DataError(r.path(), std::string("loss_scale/") + name, "must hold one value");
    return t.to(at::kDouble).item<double>();
  };
  try {
    scaler_->restore(one("scale"), int64_t(one("growth_tracker")), int64_t(one("skipped")));
  } catch (const std::invalid_argument& e) {
    throw DataError(r.path(), "loss_scale", e.what());
  }
}

void Strategy::assign(const Fill&) {
  // make_strategy refuses a shape-only model for every strategy but ZeRO-3, before anything reads it.
  throw std::logic_error("Strategy::assign: only ZeRO-3 takes the values of a model built without them");
}

std::vector<ParamGroup> parameter_groups(Task& task, double weight_decay) {
  ParamGroup decaying{{}, weight_decay, {}}, constant{{}, 0.0, {}};
  for (const auto& item : task.model()->named_parameters()) {
    if (!item.value().requires_grad()) continue;  // frozen (LoRA's base weights): not trained
    auto& group = task.decays(item.key(), item.value()) ? decaying : constant;
    group.params.push_back(item.value());
    group.names.push_back(item.key());
  }
  return {decaying, constant};
}

namespace {

// The strategy of `plan`, without its loss scaler.
std::unique_ptr<Strategy> make_plain_strategy(const comm::Runtime& rt, comm::Communicator& comm, Task& task,
                                              std::vector<ParamGroup> groups, const TrainerSettings& s,
                                              const StrategyPlan& plan) {
  if (task.defers_weights() && !plan.takes_shape_only_model)
    throw UserError("task " + task.name() + " built its model without values (for ZeRO-3's shards), but the plan is " +
                    plan.name());
  if (plan.optimizer == Optimizer::Auto)  // tasks::resolve_run turns it into adamw or sgd before training
    throw std::logic_error("make_strategy: optim.name auto was not resolved");
  if (plan.optimizer == Optimizer::SGD) return std::make_unique<DdpSgd>(rt, comm, task, std::move(groups), s);
  // The closed form of each stage, from the units ZeRO would build (before ZeRO-3 frees the parameters).
  const auto model = task.model();
  const auto planned = planned_params(groups, task.blocks(), model->parameters());
  int64_t frozen = 0;
  for (const auto& p : model->parameters())
    if (!p.requires_grad()) frozen += p.numel();
  const size_t blocks = task.blocks() ? task.blocks()->blocks().size() : 0;
  const auto memory_of = [&](int stage) {
    const int64_t bytes = stage > 0 && s.precision == Precision::BFloat16 ? 2 : 4;  // plan_strategy's dtype
    return plan_memory(stage, plan_units(stage, planned, rt.size(), blocks), rt.size(), bytes, frozen, kBucketNumel,
                       stage == 3 && plan.offload);
  };
  const auto memory = memory_of(plan.zero);
  int64_t allocated = 0;  // what the model holds now (nothing when built shape-only)
  if (!task.defers_weights())
    for (const auto& p : model->parameters()) allocated += int64_t(p.numel()) * int64_t(p.element_size());
  check_memory_fits(rt, memory, memory_of, allocated);
  if (plan.zero > 0) return std::make_unique<ZeroAdamW>(rt, comm, task, std::move(groups), s, memory);
  return std::make_unique<DdpAdamW>(rt, comm, task, std::move(groups), s, memory);
}

}  // namespace

std::unique_ptr<Strategy> make_strategy(const comm::Runtime& rt, comm::Communicator& comm, Task& task,
                                        std::vector<ParamGroup> groups, const TrainerSettings& s) {
  const StrategyPlan plan = plan_strategy(s);
  std::unique_ptr<Strategy> strategy = make_plain_strategy(rt, comm, task, std::move(groups), s, plan);
  if (s.precision == Precision::Float16) strategy->set_loss_scaler(s.loss_scaling(), rt.rank() == 0);
  return strategy;
}

// --- DistributedDataParallel ---

DdpStrategy::DdpStrategy(const comm::Runtime& rt, comm::Communicator& comm, Task& task, std::vector<ParamGroup> groups,
                         const TrainerSettings& s)
    : Strategy(std::move(groups)), s_(s), parameters_(task.model()->parameters()) {
  bucket_mb_ = s.bucket_mb > 0 ? s.bucket_mb : rt.device().is_cuda() ? 25.0 : 2.0;
  ddp_ = std::make_unique<parallel::DistributedDataParallel>(
      rt, comm, task.model(), parallel::DdpOptions{bucket_mb_, s.first_bucket_mb, false, compute_dtype(s.grad_dtype)});
}

DdpStrategy::~DdpStrategy() = default;

void DdpStrategy::begin_micro_step(bool last) { ddp_->set_sync(last); }
void DdpStrategy::reduce_gradients() {
  ddp_->finish();
  if (loss_scale() == 1.0) return;
  // GradScaler.unscale_: every gradient multiplied by the float32 inverse of the scale, in place.
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;
  for (const auto& p : parameters_)
    if (p.grad().defined()) grads.push_back(p.grad());
  at::_foreach_mul_(grads, at::Scalar(inverse_loss_scale()));
}
at::Tensor DdpStrategy::grad_norm() { return parallel::grad_norm(parameters_); }
void DdpStrategy::clip(double norm, double max_norm) { parallel::clip_gradients(parameters_, norm, max_norm); }
void DdpStrategy::set_trace(core::Trace* trace) { ddp_->set_trace(trace); }

std::string DdpStrategy::describe_reduction() const {
  return fmt::format("gradients: reduced in {} during backward, {} buckets of {} MB (the first {} MB)",
                     s_.grad_dtype == Precision::Float32    ? "float32"
                     : s_.grad_dtype == Precision::BFloat16 ? "bfloat16"
                                                            : "float16",
                     ddp_->bucket_count(), bucket_mb_, s_.first_bucket_mb);
}

void DdpStrategy::save_parameters(StateWriter& w) const {
  w.attribute("optimizer", optimizer_kind());
  for (const auto& g : groups_)
    for (size_t i = 0; i < g.params.size(); ++i) w.replicated("model/" + g.names[i], g.params[i]);
}

void DdpStrategy::load_parameters(StateReader& r) const {
  check_optimizer_kind(r, optimizer_kind());
  for (const auto& g : groups_)
    for (size_t i = 0; i < g.params.size(); ++i) r.load("model/" + g.names[i], g.params[i]);
}

DdpAdamW::DdpAdamW(const comm::Runtime& rt, comm::Communicator& comm, Task& task, std::vector<ParamGroup> groups,
                   const TrainerSettings& s, const ZeroMemoryReport& memory)
    : DdpStrategy(rt, comm, task, std::move(groups), s),
      memory_(memory),
      optimizer_(groups_, AdamWOptions{s.lr, s.beta1, s.beta2, s.eps}) {}

std::string DdpAdamW::describe() const { return memory_.to_string() + "\n" + describe_reduction(); }

void DdpAdamW::update(int64_t step) {
  optimizer_.set_lr(learning_rate(s_, step));
  optimizer_.step();
}

// optim/<name>/{exp_avg, exp_avg_sq} (parameters updated at least once) and optim/<name>/step.
void DdpAdamW::save_state(StateWriter& w) {
  save_parameters(w);
  const auto names = flat_names(groups_);
  for (size_t i = 0; i < names.size(); ++i) {
    const auto& st = optimizer_.state()[i];
    const std::string base = "optim/" + names[i];
    if (st.exp_avg.defined()) {
      w.replicated(base + "/exp_avg", st.exp_avg);
      w.replicated(base + "/exp_avg_sq", st.exp_avg_sq);
    }
    w.replicated(base + "/step", at::tensor({st.step}, at::kLong));
  }
}

// Per-parameter moments are read in shares (collective); sharded ones (a ZeRO run's) by ranges.
void DdpAdamW::load_state(StateReader& r) {
  at::NoGradGuard no_grad;
  load_parameters(r);
  const auto names = flat_names(groups_);
  const auto params = flat_params(groups_);
  const auto steps = read_steps(r, names);
  const SavedMoments moments(r);
  for (size_t i = 0; i < names.size(); ++i) {
    auto& st = optimizer_.state()[i];
    st.step = steps[i];
    st.exp_avg = st.exp_avg_sq = at::Tensor();
    const std::string base = "optim/" + names[i];
    if (!moments.sharded() && r.has(base + "/exp_avg")) {
      st.exp_avg = at::zeros_like(params[i]);
      st.exp_avg_sq = at::zeros_like(params[i]);
      r.load(base + "/exp_avg", st.exp_avg);
      r.load(base + "/exp_avg_sq", st.exp_avg_sq);
    } else if (moments.sharded() && steps[i] > 0) {
      for (const char* moment : {"exp_avg", "exp_avg_sq"}) {
        const at::Tensor all = moments.read(names[i], moment, 0, params[i].numel());
        (std::string(moment) == "exp_avg" ? st.exp_avg : st.exp_avg_sq) =
            all.view(params[i].sizes()).to(params[i].device()).clone();
      }
    }
  }
}

DdpSgd::DdpSgd(const comm::Runtime& rt, comm::Communicator& comm, Task& task, std::vector<ParamGroup> groups,
               const TrainerSettings& s)
    : DdpStrategy(rt, comm, task, std::move(groups), s),
      optimizer_(groups_, SGDOptions{s.lr, momentum_at(s, 0), s.nesterov, 0}) {}

std::string DdpSgd::describe() const {
  return fmt::format("optimizer: SGD, {} momentum {} (from {} over the {} warmup steps), coupled weight decay\n{}",
                     s_.nesterov ? "Nesterov" : "plain", s_.momentum, s_.warmup_momentum, s_.warmup,
                     describe_reduction());
}

void DdpSgd::update(int64_t step) {
  optimizer_.set_lr(learning_rate(s_, step), s_.warmup_bias_lr > 0 ? bias_learning_rate(s_, step) : -1.0);
  optimizer_.set_momentum(momentum_at(s_, step));
  optimizer_.step();
}

Metrics DdpSgd::optimizer_metrics(int64_t step) const {
  if (s_.warmup_bias_lr > 0) return {{"momentum", momentum_at(s_, step)}, {"bias_lr", bias_learning_rate(s_, step)}};
  return {{"momentum", momentum_at(s_, step)}};
}

// optim/<name>/momentum_buffer (once it exists) and optim/<name>/step.
void DdpSgd::save_state(StateWriter& w) {
  save_parameters(w);
  const auto names = flat_names(groups_);
  for (size_t i = 0; i < names.size(); ++i) {
    const auto& st = optimizer_.state()[i];
    const std::string base = "optim/" + names[i];
    if (st.momentum_buffer.defined()) w.replicated(base + "/momentum_buffer", st.momentum_buffer);
    w.replicated(base + "/step", at::tensor({st.step}, at::kLong));
  }
}

void DdpSgd::load_state(StateReader& r) {
  at::NoGradGuard no_grad;
  load_parameters(r);
  const auto names = flat_names(groups_);
  const auto params = flat_params(groups_);
  const auto steps = read_steps(r, names);
  for (size_t i = 0; i < names.size(); ++i) {
    auto& st = optimizer_.state()[i];
    st.step = steps[i];
    st.momentum_buffer = at::Tensor();
    const std::string base = "optim/" + names[i] + "/momentum_buffer";
    if (r.has(base)) {
      st.momentum_buffer = at::zeros_like(params[i], at::MemoryFormat::Preserve);
      r.load(base, st.momentum_buffer);
    }
  }
}

}  // namespace meridian::train
