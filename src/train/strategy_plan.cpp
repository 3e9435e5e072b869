#include "meridian/train/strategy_plan.h"

#include <stdexcept>

#include "meridian/core/error.h"

namespace meridian::train {

std::string StrategyPlan::name() const {
  const std::string opt = optimizer == Optimizer::SGD ? "SGD" : "AdamW";
  if (zero == 0) return "DistributedDataParallel + " + opt;
  return "ZeRO-" + std::to_string(zero) + " " + opt +
         (parameter_dtype == at::kBFloat16 ? " (bfloat16 parameters)" : "") +
         (offload ? " (float32 state offloaded to host memory)" : "");
}

at::ScalarType compute_dtype(Precision precision) {
  switch (precision) {
    case Precision::Float32:
      return at::kFloat;
    case Precision::BFloat16:
      return at::kBFloat16;
    case Precision::Float16:
      return at::kHalf;
    default:
      throw std::logic_error("compute_dtype: train.precision auto was not resolved");
  }
}

StrategyPlan plan_strategy(const TrainerSettings& s) {
  StrategyPlan p;
  p.optimizer = s.optimizer;
  p.zero = s.zero;
  p.offload = s.offload;
  p.parameter_dtype = s.zero > 0 && s.precision == Precision::BFloat16 ? at::kBFloat16 : at::kFloat;
  p.takes_shape_only_model = s.zero == 3;
  return p;
}

void check_strategy_settings(const TrainerSettings& s, const Config& c) {
  if (s.grad_dtype != Precision::Float32 && s.zero)
    throw ConfigError(c.source("comm.grad_dtype"), "comm.grad_dtype",
                      std::string(precision_name(s.grad_dtype)) +
                          " gradient reduction is DistributedDataParallel's: not with optim.zero (use "
                          "train.precision bf16: bfloat16 parameters, gradients reduced in bfloat16, float32 masters)");
  if (s.zero == 3 && s.ema > 0)
    throw ConfigError(c.source("train.ema"), "train.ema",
                      "not with optim.zero 3 (the EMA keeps a full copy of the weights, which ZeRO-3 shards)");
  if (s.zero > 0 && s.precision == Precision::BFloat16 && s.ema > 0)
    throw ConfigError(c.source("train.ema"), "train.ema",
                      "not with train.precision bf16 and optim.zero (the parameters are bfloat16 then; the float32 "
                      "masters are sharded)");
  if (s.offload && s.zero != 3)
    throw ConfigError(c.source("optim.offload"), "optim.offload",
                      "offloads ZeRO-3's state: needs optim.zero 3, got " + std::to_string(s.zero));
  if (s.optimizer == Optimizer::SGD && s.zero)
    throw ConfigError(c.source("optim.zero"), "optim.zero", "ZeRO shards AdamW only: not with optim.name sgd");
}

}  // namespace meridian::train
