// train.epochs and optim.warmup_ratio turned into steps (resolve_length), as transformers' Trainer
// counts them: ceil(epochs x batches per epoch / accumulate), warmup = round(ratio x steps).
#include "meridian/train/settings.h"

#include <gtest/gtest.h>

#include "meridian/core/config.h"
#include "meridian/core/error.h"

namespace meridian::train {
namespace {

TrainerSettings settings(const std::string& yaml) {
  return TrainerSettings::from_config(Config::parse(yaml, "t.yaml"));
}

TEST(ResolveLength, EpochsAndWarmupRatioBecomeSteps) {
  const Config c = Config::parse("train: {epochs: 3, accumulate: 4}\noptim: {warmup_ratio: 0.03}", "t.yaml");
  // Alpaca: 52,002 records, 128 per optimizer step = 32 per global batch x 4: 1626 batches per epoch.
  const auto s = resolve_length(TrainerSettings::from_config(c), 1626, c);
  EXPECT_EQ(s.steps, 1220);  // ceil(3 x 1626 / 4) = ceil(1219.5)
  EXPECT_EQ(s.warmup, 37);   // round(0.03 x 1220) = round(36.6)
  const auto half = resolve_length(settings("train: {epochs: 0.5}"), 7, c);
  EXPECT_EQ(half.steps, 4);  // ceil(3.5)
  const auto tiny = resolve_length(settings("train: {epochs: 0.01}"), 7, c);
  EXPECT_EQ(tiny.steps, 1);
}

TEST(ResolveLength, UnsetKeysLeaveStepsAndWarmup) {
  const Config c = Config::parse("train: {steps: 40}\noptim: {warmup: 5}", "t.yaml");
  const auto s = resolve_length(TrainerSettings::from_config(c), 1000, c);
  EXPECT_EQ(s.steps, 40);
  EXPECT_EQ(s.warmup, 5);
  const auto r = resolve_length(settings("train: {steps: 40}\noptim: {warmup_ratio: 0.1}"), 0, c);
  EXPECT_EQ(r.warmup, 4);
}

TEST(ResolveLength, EpochsNeedAKnownEpoch) {
  const Config c = Config::parse("train: {epochs: 2}", "t.yaml");
  try {
    resolve_length(TrainerSettings::from_config(c), 0, c);
    FAIL() << "epochs without an epoch length were taken";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.field(), "train.epochs");
  }
}

}  // namespace
}  // namespace meridian::train
