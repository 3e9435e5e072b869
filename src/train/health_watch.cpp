#include "health_watch.h"

#include <algorithm>

#include "meridian/train/trainer.h"

namespace meridian::train {

void HealthWatch::on_step_end(const StepEvent& event, const StepResult& result, LoopControl&) {
  const StepTimes& t = result.times;
  // Waiting for other ranks, wherever it was (NCCL's waits don't block the host: then the exposed
  // communication after backward is the measure).
  monitor_.record({t.total, t.data, std::max(t.comm, t.waited)});
  if (event.steps_done % every_ != 0) return;
  for (auto& w : monitor_.report(event.steps_done, balancer_.shown() ? balancer_.describe() : ""))
    warnings_.push_back(std::move(w));
}

void HealthWatch::on_run_end(TrainSummary& summary) { summary.health_warnings = warnings_; }

}  // namespace meridian::train
