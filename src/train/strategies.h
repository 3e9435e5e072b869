// Private to train: the strategies behind train::Strategy (strategy.h). DdpAdamW and DdpSgd reduce
// through parallel::DistributedDataParallel (strategy.cpp); ZeroAdamW through train::ShardedAdamW
// (zero_strategy.cpp). Tests look inside them through dynamic_cast (tests include src/train).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meridian/train/adamw.h"
#include "meridian/train/sgd.h"
#include "meridian/train/strategy.h"
#include "meridian/train/zero.h"

namespace meridian::parallel {
class DistributedDataParallel;
}

namespace meridian::train {

// Gradients reduced by DistributedDataParallel during the last micro-step's backward, clipped in
// place; the update is the subclass's.
class DdpStrategy : public Strategy {
 public:
  void begin_micro_step(bool last) override;
  void reduce_gradients() override;
  at::Tensor grad_norm() override;
  void clip(double norm, double max_norm) override;
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
  void save_state(StateWriter& w) override;
  void load_state(StateReader& r) override;
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
  Metrics optimizer_metrics(int64_t step) const override;
  void save_state(StateWriter& w) override;
  void load_state(StateReader& r) override;
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
  at::Tensor grad_norm() override;
  void clip(double norm, double max_norm) override;
  void update(int64_t step) override;
  void begin_eval() override;
  void end_eval() override;
  void save_state(StateWriter& w) override;
  void load_state(StateReader& r) override;
  void assign(const Fill& fill) override;
  ShardedAdamW& optimizer() { return *optimizer_; }

 private:
  const TrainerSettings s_;
  ZeroMemoryReport memory_;
  std::unique_ptr<comm::Communicator> gather_comm_;  // stage 3's parameter gathers (forward's order)
  // The flags of ShardedAdamW's step 1 agreed over MPI on the host (GPU ranks: nothing read back).
  std::unique_ptr<comm::Communicator> flags_comm_;
  std::unique_ptr<ShardedAdamW> optimizer_;
  at::Tensor norm_;   // of the last reduce_gradients()
  double scale_ = 1;  // of the last clip(): the clip and 1/loss scale together
};

}  // namespace meridian::train
