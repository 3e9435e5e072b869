// train::LossScaler (fp16's loss scale) against a closed form written out by hand, and against the
// kernel torch.amp.GradScaler itself updates its scale with (ATen's _amp_update_scale_, the same
// code the Python GradScaler.update() calls) over a long sequence of good and overflowing steps;
// the train.loss_scale keys as TrainerSettings reads them.
#include "meridian/train/loss_scale.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <random>

#include "meridian/core/config.h"
#include "meridian/core/config_schema.h"
#include "meridian/core/error.h"
#include "meridian/train/settings.h"
#include "meridian/train/strategy_plan.h"

namespace meridian::train {
namespace {

TEST(LossScaler, BacksOffOnOverflowAndGrowsAfterTheInterval) {
  LossScaler s({true, 65536.0, 3});
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.inverse(), 1.0 / 65536.0);
  // overflow, 3 good (grow), 2 good, overflow, overflow, 3 good (grow)
  const bool finite[] = {false, true, true, true, true, true, false, false, true, true, true};
  const double scales[] = {32768, 32768, 32768, 65536, 65536, 65536, 32768, 16384, 16384, 16384, 32768};
  const int64_t trackers[] = {0, 1, 2, 0, 1, 2, 0, 0, 1, 2, 0};
  for (size_t i = 0; i < std::size(finite); ++i) {
    const bool changed = s.update(finite[i]);
    EXPECT_EQ(s.scale(), scales[i]) << "step " << i;
    EXPECT_EQ(s.growth_tracker(), trackers[i]) << "step " << i;
    EXPECT_EQ(changed, scales[i] != (i ? scales[i - 1] : 65536.0)) << "step " << i;
  }
  EXPECT_EQ(s.skipped(), 3);
}

TEST(LossScaler, CountsSkipsInARowAndGrowsATrackerPastASmallerInterval) {
  LossScaler s({true, 1024.0, 4});
  for (int i = 0; i < 3; ++i) s.update(false);
  EXPECT_EQ(s.skipped_in_a_row(), 3);
  s.update(true);
  EXPECT_EQ(s.skipped_in_a_row(), 0);
  EXPECT_EQ(s.skipped(), 3);
  LossScaler resumed({true, 1024.0, 4});
  resumed.restore(1024, 10, 0);       // a checkpoint of a run with a larger interval
  EXPECT_TRUE(resumed.update(true));  // past the interval: grows at once, as it would have
  EXPECT_EQ(resumed.scale(), 2048);
  EXPECT_EQ(resumed.growth_tracker(), 0);
}

TEST(LossScaler, FollowsGradScalersOwnKernel) {
  // torch.amp.GradScaler.update(): torch._amp_update_scale_(scale, growth_tracker, found_inf,
  // growth_factor 2, backoff_factor 0.5, growth_interval), on float32 / int32 tensors.
  LossScaler mine({true, 1024.0, 5});
  at::Tensor scale = at::full({1}, 1024.0, at::kFloat), tracker = at::zeros({1}, at::kInt);
  std::mt19937 rng(7);
  std::bernoulli_distribution overflow(0.15);
  int changes = 0;
  for (int step = 0; step < 400; ++step) {
    const bool inf = overflow(rng);
    at::_amp_update_scale_(scale, tracker, at::full({1}, inf ? 1.0 : 0.0, at::kFloat), 2.0, 0.5, 5);
    changes += mine.update(!inf);
    ASSERT_EQ(mine.scale(), scale.item<float>()) << "step " << step;
    ASSERT_EQ(mine.growth_tracker(), tracker.item<int>()) << "step " << step;
  }
  EXPECT_GT(changes, 20);  // both ways, many times
}

TEST(LossScaler, AFixedScaleStaysAndStillCountsSkips) {
  LossScaler s({false, 1000.0, 2000});
  for (bool f : {false, true, true, false}) EXPECT_FALSE(s.update(f));
  EXPECT_EQ(s.scale(), 1000.0);
  EXPECT_EQ(s.inverse(), double(float(1.0 / 1000.0)));
  EXPECT_EQ(s.skipped(), 2);
  EXPECT_NE(s.describe().find("fixed loss scale 1000"), std::string::npos);
}

TEST(LossScaler, RestoresACheckpointsStateAndRefusesABadOne) {
  LossScaler s({true, 65536.0, 2000});
  s.restore(8192, 17, 4);
  EXPECT_EQ(s.scale(), 8192);
  EXPECT_EQ(s.growth_tracker(), 17);
  EXPECT_EQ(s.skipped(), 4);
  EXPECT_THROW(s.restore(0, 0, 0), std::invalid_argument);
  EXPECT_THROW(s.restore(std::nan(""), 0, 0), std::invalid_argument);
  EXPECT_THROW(s.restore(2, -1, 0), std::invalid_argument);
}

// Checked against the schema (ranges, choices), then read.
TrainerSettings read(const std::string& yaml) {
  Config config = Config::parse(yaml, "t.yaml");
  ConfigSchema schema;
  TrainerSettings::declare(schema);
  schema.check(config);
  return TrainerSettings::from_config(config);
}

TEST(LossScaleSettings, DynamicOrAFixedNumber) {
  const auto d = read("train: {precision: fp16, loss_scale_init: 1024, loss_scale_growth_interval: 7}");
  EXPECT_EQ(d.precision, Precision::Float16);
  EXPECT_TRUE(d.loss_scaling().dynamic);
  EXPECT_EQ(d.loss_scaling().init, 1024);
  EXPECT_EQ(d.loss_scaling().growth_interval, 7);
  const auto f = read("train: {precision: fp16, loss_scale: 128}");
  EXPECT_FALSE(f.loss_scaling().dynamic);
  EXPECT_EQ(f.loss_scaling().init, 128);
  for (const char* bad : {"abc", "0", "-4", "12x", "inf"}) {
    try {
      read(std::string("train: {loss_scale: '") + bad + "'}");
      ADD_FAILURE() << bad << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("t.yaml"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("train.loss_scale"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(read("train: {loss_scale_init: 0}"), ConfigError);
  EXPECT_THROW(read("train: {loss_scale_init: 1.0e+39}"), ConfigError);  // beyond float32
  EXPECT_THROW(read("train: {loss_scale: '1e39'}"), ConfigError);
  EXPECT_THROW(read("train: {loss_scale_growth_interval: 0}"), ConfigError);
}

TEST(LossScaleSettings, PrecisionsAndTheirAutocastDtypes) {
  EXPECT_EQ(compute_dtype(read("train: {precision: fp16}").precision), at::kHalf);
  EXPECT_EQ(compute_dtype(read("train: {precision: bf16}").precision), at::kBFloat16);
  EXPECT_EQ(compute_dtype(read("{}").precision), at::kFloat);
  EXPECT_EQ(read("train: {precision: auto}").precision, Precision::Auto);
  EXPECT_THROW(compute_dtype(Precision::Auto), std::logic_error);
  EXPECT_EQ(read("comm: {grad_dtype: fp16}").grad_dtype, Precision::Float16);
  EXPECT_THROW(read("comm: {grad_dtype: fp16}\noptim: {zero: 1}"), ConfigError);
  EXPECT_THROW(read("comm: {grad_dtype: auto}"), ConfigError);
}

}  // namespace
}  // namespace meridian::train
