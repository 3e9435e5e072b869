#include "meridian/train/loss_scale.h"

#include <spdlog/fmt/fmt.h>

#include <cmath>
#include <stdexcept>

namespace meridian::train {

bool LossScaler::update(bool finite) {
  if (!finite) ++skipped_;
  in_a_row_ = finite ? 0 : in_a_row_ + 1;
  if (!s_.dynamic) return false;
  const float before = scale_;
  if (!finite) {
    scale_ *= float(LossScaleSettings::kBackoff);
    tracker_ = 0;
  } else if (++tracker_ >= s_.growth_interval) {
    const float grown = scale_ * float(LossScaleSettings::kGrowth);
    if (std::isfinite(grown)) scale_ = grown;
    tracker_ = 0;
  }
  return scale_ != before;
}

void LossScaler::restore(double scale, int64_t growth_tracker, int64_t skipped) {
  if (!std::isfinite(scale) || scale <= 0 || growth_tracker < 0 || skipped < 0)
    throw std::invalid_argument(
        fmt::format("loss scale state: scale {}, growth tracker {}, skipped {}", scale, growth_tracker, skipped));
  if (s_.dynamic) scale_ = float(scale);  // a fixed scale is the config's, whatever the checkpoint held
  tracker_ = s_.dynamic ? growth_tracker : 0;
  skipped_ = skipped;
}

std::string LossScaler::describe() const {
  if (!s_.dynamic) return fmt::format("fixed loss scale {:g} (steps with inf/NaN gradients skipped)", s_.init);
  return fmt::format(
      "dynamic loss scale (from {:g}; x{:g} after {} steps in a row with finite gradients, x{:g} and "
      "the step skipped on inf/NaN gradients)",
      s_.init, LossScaleSettings::kGrowth, s_.growth_interval, LossScaleSettings::kBackoff);
}

}  // namespace meridian::train
