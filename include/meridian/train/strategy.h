// How the gradients of a data-parallel step are synchronised and the parameters updated: one
// interface, three implementations (the only place that knows which optimizer and which reduction a
// run uses):
//   DdpAdamW   parallel::DistributedDataParallel (buckets reduced during backward) + train::AdamW
//   DdpSgd     the same reduction + train::SGD (momentum ramped over the warmup)
//   ZeroAdamW  train::ShardedAdamW, ZeRO stages 1-3 (reduces the gradients itself)
//
// One optimizer step, as train::Trainer drives it:
//   for each micro-step:  strategy.begin_micro_step(last);  task.next_batch();
//                         { autocast: strategy.begin_forward(); loss = task.forward(); }
//                         loss.backward();  strategy.end_backward();
//   strategy.reduce_gradients();                 // every rank holds the averaged gradient (or its shard)
//   norm = strategy.clip(max_norm);              // the global norm; above max_norm the update is scaled
//   if (step is good) strategy.update(step);     // at learning_rate(settings, step)
//   strategy.zero_grad();
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

#include "meridian/train/adamw.h"
#include "meridian/train/settings.h"
#include "meridian/train/sgd.h"
#include "meridian/train/state_io.h"
#include "meridian/train/task.h"
#include "meridian/train/zero.h"

namespace meridian::comm {
class Runtime;
}
namespace meridian::core {
class Trace;
}
namespace meridian::parallel {
class DistributedDataParallel;
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

  // Not collective: before micro-step's batch; `last`: the step's last micro-step (DDP reduces
  // during that backward only).
  virtual void begin_micro_step(bool last) {}
  // Collective at ZeRO-3 (the units outside blocks gathered), under the forward's autocast.
  virtual void begin_forward() {}
  // Collective at ZeRO-2/3: after each backward, the gradient reductions backward left undone.
  virtual void end_backward() {}
  // Collective: after the last micro-step, every rank holds the gradient averaged over ranks (DDP)
  // or its shard of it (ZeRO).
  virtual void reduce_gradients() = 0;
  // The global L2 norm of the averaged gradient (the same on every rank; NaN/Inf passed through);
  // above max_norm the update is scaled by max_norm / (norm + 1e-6), as torch's clip_grad_norm_.
  // Not collective after reduce_gradients().
  virtual double clip(double max_norm) = 0;
  // Collective (ZeRO's allgathers): the update of optimizer step `step` (0-based), at
  // learning_rate(settings, step). Not called for a skipped (non-finite) step.
  virtual void update(int64_t step) = 0;
  // Not collective: gradients zeroed in place (or dropped) for the next step.
  virtual void zero_grad();
  // Collective at ZeRO-3: an evaluation's forward passes run between these.
  virtual void begin_eval() {}
  virtual void end_eval() {}
  // Values to log with the step's loss (SGD: its momentum at `step`).
  virtual Metrics step_metrics(int64_t step) const { return {}; }
  // Records the reduction's buckets in a trace (DDP); not owned.
  virtual void set_trace(core::Trace* trace) {}

  // Collective: the trained parameters as model/<name> and the optimizer state under optim/ (root
  // attribute optimizer = optimizer_kind()).
  virtual void save(StateWriter& w) = 0;
  // Collective: the reverse, from a checkpoint written by any strategy of the same optimizer kind
  // on any world size. UserError naming both when the kind differs; DataError naming the file and
  // the tensor when one is missing or has another shape.
  virtual void load(StateReader& r) = 0;
  // Collective: every trained parameter's value, written by fill(name, value) into `value` (float32,
  // the parameter's shape, on the parameters' device; names as in the task's named_parameters()),
  // then kept in ZeRO-3's float32 master shards, unit by unit (one unit's values in memory at a
  // time). Every rank must write the same values. For a model built shape-only (Task::defers_weights,
  // which make_strategy allows with optim.zero 3 only): other strategies throw std::logic_error.
  using Fill = std::function<void(const std::string& name, const at::Tensor& value)>;
  virtual void assign(const Fill& fill);

 protected:
  explicit Strategy(std::vector<ParamGroup> groups) : groups_(std::move(groups)) {}
  // The trained parameters, in the optimizer's groups (decayed, then not); flat order = group order
  // then parameter order.
  std::vector<ParamGroup> groups_;
};

// The trained parameters of `model` (frozen ones left out) in two groups: decayed at
// `weight_decay` and not (Task::decays), with their names.
std::vector<ParamGroup> parameter_groups(Task& task, double weight_decay);

// The dtype ZeRO keeps parameters in: bfloat16 with train.precision bf16 and optim.zero > 0 (the
// float32 masters sharded), float32 otherwise; frozen parameters (LoRA's base) are kept in it too.
at::ScalarType parameter_dtype(const TrainerSettings& settings);

// Collective: the strategy `settings` asks for (optim.name, optim.zero, comm.*) over task.model(),
// training `groups` (parameter_groups()); the parameters are then identical on every rank (rank
// 0's broadcast). `grad_comm` carries the
// gradient reductions and must outlive the strategy. AdamW strategies first check that their
// closed-form memory fits on each node (UserError on every rank otherwise, naming the stages that
// fit).
std::unique_ptr<Strategy> make_strategy(const comm::Runtime& runtime, comm::Communicator& grad_comm, Task& task,
                                        std::vector<ParamGroup> groups, const TrainerSettings& settings);

// --- The implementations (tests look inside them through dynamic_cast) ---

// Gradients reduced by DistributedDataParallel during the last micro-step's backward, clipped in
// place; the update is the subclass's.
class DdpStrategy : public Strategy {
 public:
  void begin_micro_step(bool last) override;
  void reduce_gradients() override;
  double clip(double max_norm) override;
  void set_trace(core::Trace* trace) override;
  ~DdpStrategy() override;

 protected:
  DdpStrategy(const comm::Runtime& runtime, comm::Communicator& comm, Task& task, std::vector<ParamGroup> groups,
              const TrainerSettings& settings);
  std::string describe_reduction() const;
  // The trained parameters (model/<name>) and the root attribute optimizer; load refuses another
  // optimizer kind before reading anything.
  void save_parameters(StateWriter& w) const;
  void load_parameters(StateReader& r) const;
  const TrainerSettings s_;
  std::unique_ptr<parallel::DistributedDataParallel> ddp_;
  double bucket_mb_ = 0;

 private:
  std::vector<at::Tensor> parameters_;  // the model's, all of them (as clip_grad_norm always took them)
};

class DdpAdamW : public DdpStrategy {
 public:
  DdpAdamW(const comm::Runtime& runtime, comm::Communicator& comm, Task& task, std::vector<ParamGroup> groups,
           const TrainerSettings& settings, const ZeroMemoryReport& memory);
  std::string optimizer_kind() const override { return "adamw"; }
  std::string describe() const override;
  std::optional<ZeroMemoryReport> memory() const override { return memory_; }
  void update(int64_t step) override;
  void save(StateWriter& w) override;
  void load(StateReader& r) override;
  AdamW& optimizer() { return optimizer_; }

 private:
  ZeroMemoryReport memory_;
  AdamW optimizer_;
};

class DdpSgd : public DdpStrategy {
 public:
  DdpSgd(const comm::Runtime& runtime, comm::Communicator& comm, Task& task, std::vector<ParamGroup> groups,
         const TrainerSettings& settings);
  std::string optimizer_kind() const override { return "sgd"; }
  std::string describe() const override;
  void update(int64_t step) override;
  Metrics step_metrics(int64_t step) const override;
  void save(StateWriter& w) override;
  void load(StateReader& r) override;
  SGD& optimizer() { return optimizer_; }

 private:
  SGD optimizer_;
};

class ZeroAdamW : public Strategy {
 public:
  // Collective: broadcasts rank 0's model, then builds ShardedAdamW (stage 3 frees the parameters).
  // A task that defers_weights() (stage 3 only, else UserError): nothing is broadcast, the shards
  // start at zero and wait for assign().
  ZeroAdamW(const comm::Runtime& runtime, comm::Communicator& comm, Task& task, std::vector<ParamGroup> groups,
            const TrainerSettings& settings, const ZeroMemoryReport& memory);
  ~ZeroAdamW() override;
  std::string optimizer_kind() const override { return "adamw"; }
  std::string describe() const override;
  std::optional<ZeroMemoryReport> memory() const override { return memory_; }
  void begin_forward() override;
  void end_backward() override;
  void reduce_gradients() override;
  double clip(double max_norm) override;
  void update(int64_t step) override;
  void begin_eval() override;
  void end_eval() override;
  void save(StateWriter& w) override;
  void load(StateReader& r) override;
  void assign(const Fill& fill) override;
  ShardedAdamW& optimizer() { return *optimizer_; }

 private:
  const TrainerSettings s_;
  ZeroMemoryReport memory_;
  std::unique_ptr<comm::Communicator> gather_comm_;  // stage 3's parameter gathers (forward's order)
  std::unique_ptr<ShardedAdamW> optimizer_;
  double norm_ = 0, scale_ = 1;  // of the last reduce_gradients() / clip()
};

}  // namespace meridian::train
