#include "sync_count.h"

#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>

#include <algorithm>

#include "meridian/comm/communicator.h"
#include "meridian/train/trainer.h"

namespace meridian::train {

// For one step, LibTorch's CUDA sync debug mode warns at every host wait for the GPU; this handler
// counts those warnings instead of printing them and passes any other warning on.
class SyncCount::Counter : public c10::WarningHandler {
 public:
  Counter() : previous_(c10::WarningUtils::get_warning_handler()), guard_(this) {
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
  }
  ~Counter() override { c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED); }
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

SyncCount::SyncCount(comm::Communicator& control, bool gpu) : control_(control), gpu_(gpu) {}
SyncCount::~SyncCount() = default;

void SyncCount::on_run_begin(int64_t step, LoopControl&) { first_ = last_ = step; }

void SyncCount::on_step_begin(int64_t) {
  if (gpu_) counter_ = std::make_unique<Counter>();
}

void SyncCount::on_step_end(const StepEvent& event, const StepResult&, LoopControl&) {
  last_ = event.steps_done;
  if (!counter_) return;
  if (last_ > first_ + 1) total_ += counter_->count, most_ = std::max(most_, counter_->count);  // not the warm-up
  counter_.reset();
}

void SyncCount::on_run_end(TrainSummary& summary) {
  if (last_ == first_) return;  // no step: not counted
  const double counted = double(std::max<int64_t>(1, last_ - first_ - 1));
  at::Tensor both = at::tensor({gpu_ ? double(total_) / counted : -1.0, gpu_ ? double(most_) : -1.0}, at::kDouble);
  control_.allreduce(both, comm::ReduceOp::Max);
  summary.host_syncs_per_step = both[0].item<double>();
  summary.host_syncs_max = int64_t(both[1].item<double>());
}

}  // namespace meridian::train
