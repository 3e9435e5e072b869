// How the gradients of a data-parallel step are synchronised and the parameters updated: one
// interface, three implementations (src/train/strategies.h, private; the only place that knows which
// optimizer and which reduction a run uses; what the rest of the program needs to know of that
// before the task is built is train::StrategyPlan, strategy_plan.h):
//   DdpAdamW   parallel::DistributedDataParallel (buckets reduced during backward) + train::AdamW
//   DdpSgd     the same reduction + train::SGD (momentum ramped over the warmup)
//   ZeroAdamW  train::ShardedAdamW, ZeRO stages 1-3 (reduces the gradients itself)
//
// One optimizer step, as train::Trainer drives it:
//   for each micro-step:  strategy.begin_micro_step(last);  task.next_batch();
//                         { autocast: strategy.begin_forward(); loss = task.forward(); }
//                         strategy.backward(loss);  strategy.end_backward();
//   strategy.reduce_gradients();                 // every rank holds the averaged gradient (or its shard)
//   norm = read(strategy.grad_norm());           // the global norm, read with the loss (the step's one host read)
//   if (loss finite everywhere) applied = strategy.apply(norm, max_norm, step);  // clip, update
//   strategy.zero_grad();
// With train.precision fp16 the strategy owns a train::LossScaler (loss_scale.h): backward() runs on
// the scaled loss, the gradients are unscaled before grad_norm() (DDP: in place, as
// GradScaler.unscale_; ZeRO: 1/scale folded into the update's factor), and apply() skips the update
// of a step whose norm is not finite (the scale backs off; the trainer's NaN guard does not count it).
// An evaluation runs between begin_eval() and end_eval(). Checkpoints: save() and load() write and
// read the trained parameters and the optimizer state, in the strategy's own layout, through
// train::StateWriter / StateReader (ckpt implements them).
//
// Collective operations (marked) are called by every rank in the same order; nothing here is
// thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meridian/train/loss_scale.h"
#include "meridian/train/memory_plan.h"
#include "meridian/train/param_group.h"
#include "meridian/train/settings.h"
#include "meridian/train/state_io.h"
#include "meridian/train/task.h"

namespace meridian::comm {
class Runtime;
class Communicator;
}  // namespace meridian::comm
namespace meridian::core {
class Trace;
}
namespace meridian::train {

class Strategy {
 public:
  virtual ~Strategy() = default;

  // The kind of optimizer state, as checkpoints record it (root attribute optimizer): "adamw" (ZeRO
  // too: the same state, sharded) or "sgd". A run resumes only from its own kind.
  virtual std::string optimizer_kind() const = 0;
  // Rank 0's log at start: what reduces and updates, and its memory (not collective).
  virtual std::string describe() const = 0;
  // The closed-form memory per rank before activations (AdamW strategies); nullopt otherwise.
  virtual std::optional<ZeroMemoryReport> memory() const { return std::nullopt; }

  // Not collective: optimizer step `step` (0-based) begins, before its first micro-step.
  void begin_step(int64_t step) { step_ = step; }
  // Not collective: before micro-step's batch; `last`: the step's last micro-step (DDP reduces
  // during that backward only).
  virtual void begin_micro_step(bool last) {}
  // Collective at ZeRO-3 (the units outside blocks gathered), under the forward's autocast.
  virtual void begin_forward() {}
  // Not collective (collectives may run inside, from DDP's and ZeRO's gradient hooks, in the same
  // order on every rank): the backward of `loss`, multiplied by the loss scale when there is one.
  void backward(const at::Tensor& loss);
  // Collective at ZeRO-2/3: after each backward, the gradient reductions backward left undone.
  virtual void end_backward() {}
  // Collective: after the last micro-step, every rank holds the gradient averaged over ranks (DDP)
  // or its shard of it (ZeRO).
  virtual void reduce_gradients() = 0;
  // After reduce_gradients(): the global L2 norm of the averaged gradient (the same on every rank;
  // NaN/Inf passed through) as a 0-dim float64 tensor on the gradients' device, nothing read back.
  // Not collective.
  virtual at::Tensor grad_norm() = 0;
  // Collective (ZeRO's allgathers) unless it skips: the update of optimizer step `step` (0-based),
  // given `norm` (grad_norm(), read by the caller, the same on every rank): above max_norm the update
  // is scaled by max_norm / (norm + 1e-6), as torch's clip_grad_norm_, then made at
  // learning_rate(settings, step). With a loss scaler, a norm that is not finite skips the update on
  // every rank and backs the scale off (rank 0 logs it), and the result is false; else the scaler
  // counts a good step. Not called for a step the NaN guard skips (a loss not finite).
  bool apply(double norm, double max_norm, int64_t step);
  // The loss scaler (train.precision fp16), or null.
  const LossScaler* loss_scaler() const { return scaler_ ? &*scaler_ : nullptr; }
  // make_strategy: fp16's scaler; `speaks`: this rank logs its back-offs (rank 0). A test seam:
  // MERIDIAN_TEST_OVERFLOW_STEPS="5,9" (1-based optimizer steps) multiplies those steps' scaled loss
  // by 2^40, so that their backward overflows float16 for any loss scale (UserError naming the
  // variable when it is malformed).
  void set_loss_scaler(const LossScaleSettings& settings, bool speaks);
  // Not collective: gradients zeroed in place (or dropped) for the next step.
  virtual void zero_grad();
  // Collective at ZeRO-3: an evaluation's forward passes run between these.
  virtual void begin_eval() {}
  virtual void end_eval() {}
  // Values to log with the step's loss: the optimizer's (SGD: its momentum at `step`) and the loss
  // scaler's (loss_scale, scale_skips).
  Metrics step_metrics(int64_t step) const;
  // Records the reduction's buckets in a trace (DDP); not owned.
  virtual void set_trace(core::Trace* trace) {}

  // Collective: the trained parameters as model/<name>, the optimizer state under optim/ (root
  // attribute optimizer = optimizer_kind()) and the loss scaler's under loss_scale/.
  void save(StateWriter& w);
  // Collective: the reverse, from a checkpoint written by any strategy of the same optimizer kind
  // on any world size. UserError naming both when the kind differs; DataError naming the file and
  // the tensor when one is missing or has another shape. A checkpoint without a loss scale (another
  // precision's) starts the scaler at train.loss_scale_init.
  void load(StateReader& r);
  // Collective: every trained parameter's value, written by fill(name, value) into `value` (float32,
  // the parameter's shape, on the parameters' device; names as in the task's named_parameters()),
  // then kept in ZeRO-3's float32 master shards, unit by unit (one unit's values in memory at a
  // time). Every rank must write the same values. For a model built shape-only (Task::defers_weights,
  // which make_strategy allows with optim.zero 3 only): other strategies throw std::logic_error.
  using Fill = std::function<void(const std::string& name, const at::Tensor& value)>;
  virtual void assign(const Fill& fill);

 protected:
  explicit Strategy(std::vector<ParamGroup> groups) : groups_(std::move(groups)) {}
  // The subclass's parts of the above.
  virtual void clip(double norm, double max_norm) = 0;  // sets the clip for update()
  virtual void update(int64_t step) = 0;
  virtual Metrics optimizer_metrics(int64_t step) const { return {}; }
  virtual void save_state(StateWriter& w) = 0;
  virtual void load_state(StateReader& r) = 0;
  // The loss scale the gradients hold until unscaled (1 without a scaler) and its float32 inverse.
  double loss_scale() const { return scaler_ ? scaler_->scale() : 1.0; }
  double inverse_loss_scale() const { return scaler_ ? scaler_->inverse() : 1.0; }
  // The trained parameters, in the optimizer's groups (decayed, then not); flat order = group order
  // then parameter order.
  std::vector<ParamGroup> groups_;

 private:
  std::optional<LossScaler> scaler_;
  bool speaks_ = false;
  int64_t step_ = 0;                     // begin_step()'s
  std::vector<int64_t> overflow_steps_;  // MERIDIAN_TEST_OVERFLOW_STEPS (1-based)
};

// The trained parameters of `model` (frozen ones left out) in two groups: decayed at
// `weight_decay` and not (Task::decays), with their names.
std::vector<ParamGroup> parameter_groups(Task& task, double weight_decay);

// Collective: the strategy of plan_strategy(settings) (optim.name, optim.zero, comm.*) over
// task.model(), training `groups` (parameter_groups()); the parameters are then identical on every
// rank (rank 0's broadcast). `grad_comm` carries the gradient reductions and must outlive the
// strategy. UserError for a model built shape-only (Task::defers_weights) when the plan takes none. AdamW strategies
// first check that their closed-form memory fits on each node (UserError on every rank otherwise, naming the stages
// that fit).
std::unique_ptr<Strategy> make_strategy(const comm::Runtime& runtime, comm::Communicator& grad_comm, Task& task,
                                        std::vector<ParamGroup> groups, const TrainerSettings& settings);

}  // namespace meridian::train
