#include "run_summary.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "meridian/comm/communicator.h"
#include "meridian/comm/runtime.h"
#include "progress.h"

namespace meridian::train {

void RunSummary::on_step_end(const StepEvent& event, const StepResult& result, LoopControl&) {
  // The first step warms up (allocations, caches).
  if (event.steps_done > first_ + 1) measured_ += result.times, ++measured_steps_;
  stepped_ = true;
}

void RunSummary::on_run_end(TrainSummary& summary) {
  if (summary.stopped || !stepped_) return;
  // Mean over measured steps and ranks, and the slowest rank's mean, per phase.
  const StepTimes& t = measured_;
  const double n = double(std::max<int64_t>(measured_steps_, 1));
  auto mean =
      at::tensor({t.data / n, t.forward / n, t.backward / n, t.comm / n, t.optimizer / n, t.total / n}, at::kDouble);
  auto slowest = mean.clone();
  control_.allreduce(mean, comm::ReduceOp::Avg);
  control_.allreduce(slowest, comm::ReduceOp::Max);
  auto unpack = [](const at::Tensor& v) {
    auto a = v.accessor<double, 1>();
    return StepTimes{a[0], a[1], a[2], a[3], a[4], a[5]};
  };
  summary.mean_times = unpack(mean);
  summary.max_times = unpack(slowest);
  if (measured_steps_ > 0 && summary.mean_times.total > 0) {
    summary.samples_per_s = double(global_batch_) / summary.max_times.total;
    summary.model_flops_per_s = 3 * task_.flops_per_sample() * summary.samples_per_s;
  }
  if (!trace_) return;
  std::vector<std::string> events;  // streamed: a long run's traces may pass gather's 2 GiB
  rt_.stream_to_root(trace_->events_json(), [&](int, const std::string& e) { events.push_back(e); });
  if (rt_.rank() == 0) {
    core::Trace::write(trace_path_, events);
    spdlog::info("trace of {} ranks written to {}", rt_.size(), trace_path_);
  }
}

}  // namespace meridian::train
