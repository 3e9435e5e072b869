// What a run's train::Strategy will be, decided from the settings before the task is built: the one
// place that knows what the optimizer and the ZeRO stage imply for the rest of the program. A task
// asks it how to build its model (shape-only, in which dtype), the trainer what it reports, and
// make_strategy (strategy.h) builds what it says. Not collective; no MPI.
#pragma once

#include <c10/core/ScalarType.h>

#include <string>

#include "meridian/core/config.h"
#include "meridian/train/settings.h"

namespace meridian::train {

struct StrategyPlan {
  Optimizer optimizer = Optimizer::AdamW;  // adamw or sgd (auto is decided before: tasks::resolve_run)
  int zero = 0;                            // 0: DistributedDataParallel; 1-3: ShardedAdamW's stage
  bool offload = false;                    // ZeRO-3's float32 state in host memory
  // The dtype the parameters are kept in, the frozen ones (LoRA's base) too: bfloat16 with
  // train.precision bf16 and ZeRO (the float32 masters in the shards), float32 otherwise (fp16 too:
  // its float32 parameters are the masters, as torch.amp's).
  at::ScalarType parameter_dtype = at::kFloat;
  // ZeRO-3 keeps only each rank's shard: a task may build its model shape-only (Task::defers_weights)
  // and have the values written into the shards (Strategy::assign). No other strategy takes such a model.
  bool takes_shape_only_model = false;

  // "ZeRO-3 AdamW (float32 state offloaded to host memory)", "DistributedDataParallel + SGD", ...
  std::string name() const;
};

// The autocast dtype of a resolved precision: kFloat (no autocast), kBFloat16 or kHalf;
// std::logic_error for auto (resolved before anything computes).
at::ScalarType compute_dtype(Precision precision);

// The plan of `settings` (built by TrainerSettings::from_config, which checked them).
StrategyPlan plan_strategy(const TrainerSettings& settings);

// ConfigError naming the key for settings the strategies cannot run together: 16-bit gradient
// reduction or SGD with ZeRO, an EMA with ZeRO-3 or with ZeRO's bfloat16 parameters, offload without
// ZeRO-3. TrainerSettings::from_config calls it; `config` names where each value came from.
void check_strategy_settings(const TrainerSettings& settings, const Config& config);

}  // namespace meridian::train
