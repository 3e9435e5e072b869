// train.epochs and optim.warmup_ratio turned into steps (resolve_length): ceil(epochs x batches per
// epoch / accumulate), warmup = ceil(ratio x steps) (transformers' get_warmup_steps); each wins over
// the key it replaces (train.steps, optim.warmup), as a config printed with its defaults has both.
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
  EXPECT_EQ(s.warmup, 37);   // ceil(0.03 x 1220) = ceil(36.6)
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
  const auto r = resolve_length(settings("train: {steps: 40}\noptim: {warmup_ratio: 0.11}"), 0, c);
  EXPECT_EQ(r.warmup, 5);  // ceil(4.4)
  // A config printed with its defaults (--print-config) has both: epochs and the ratio win.
  const Config both = Config::parse("train: {steps: 100, epochs: 2}\noptim: {warmup: 10, warmup_ratio: 0.5}", "t.yaml");
  const auto b = resolve_length(TrainerSettings::from_config(both), 3, both);
  EXPECT_EQ(b.steps, 6);
  EXPECT_EQ(b.warmup, 3);
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
