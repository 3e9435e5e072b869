// train.health_every as an observer of the loop (private to train; health_watch.cpp): every step's
// times to ops::HealthMonitor, its report every health_every steps, its warnings into the summary.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "meridian/ops/health.h"
#include "meridian/train/balance.h"
#include "meridian/train/observer.h"

namespace meridian::train {

class HealthWatch : public Observer {
 public:
  // Collective (the monitor gathers every rank's host and local rank).
  HealthWatch(const comm::Runtime& rt, comm::Communicator& control, const std::string& run_dir, int64_t every,
              const Balancer& balancer)
      : monitor_(rt, control, run_dir), every_(every), balancer_(balancer) {}

  // Collective every `every` steps (the monitor's gather and link probe).
  void on_step_end(const StepEvent& event, const StepResult& result, LoopControl& control) override;
  void on_run_end(TrainSummary& summary) override;  // rank 0: the warnings

 private:
  ops::HealthMonitor monitor_;
  int64_t every_;
  const Balancer& balancer_;
  std::vector<std::string> warnings_;
};

}  // namespace meridian::train
