// The loss scale of fp16 training (train.precision fp16), with the semantics of PyTorch's
// torch.amp.GradScaler: the backward runs on loss x scale so that small gradients survive float16;
// the gradients are unscaled (x 1/scale) before they are clipped, logged or applied; a step whose
// gradients hold an inf or a NaN is skipped and the scale backs off (x 0.5); after
// growth_interval applied steps in a row the scale grows (x 2). train.loss_scale: a fixed number
// keeps the scale (a non-finite step is still skipped).
//
// A pure state machine: no tensors, no MPI. train::Strategy owns it (the scaling belongs with the
// optimizer step) and feeds it the step's agreed outcome, so every rank holds the same state; the
// checkpoint keeps it (scale, growth tracker, skipped count) for an exact resume. Not thread-safe.
#pragma once

#include <cstdint>
#include <string>

namespace meridian::train {

struct LossScaleSettings {
  bool dynamic = true;             // train.loss_scale: dynamic (GradScaler) or a fixed number
  double init = 65536.0;           // train.loss_scale_init (dynamic), or the fixed scale
  int64_t growth_interval = 2000;  // train.loss_scale_growth_interval: applied steps in a row before growth
  static constexpr double kBackoff = 0.5, kGrowth = 2.0;  // GradScaler's backoff_factor, growth_factor
};

class LossScaler {
 public:
  explicit LossScaler(const LossScaleSettings& settings) : s_(settings), scale_(float(settings.init)) {}

  // What the loss is multiplied by before backward, and the gradients by after it (GradScaler's
  // inv_scale: the reciprocal computed in double, rounded to float32).
  double scale() const { return scale_; }
  double inverse() const { return double(float(1.0 / double(scale_))); }

  // The outcome of a step whose loss was finite on every rank: `finite` false (some gradient inf or
  // NaN on some rank or shard) means the step was skipped; then the scale backs off and the growth
  // tracker restarts; else the tracker counts and, at growth_interval, the scale grows (when the
  // grown scale is finite) and the tracker restarts. GradScaler's _amp_update_scale_, in float32
  // (the tracker compared with >=: a checkpoint's tracker past a smaller interval grows at once).
  // Returns true when the scale changed.
  bool update(bool finite);

  int64_t growth_tracker() const { return tracker_; }
  int64_t skipped() const { return skipped_; }            // steps skipped for non-finite gradients
  int64_t skipped_in_a_row() const { return in_a_row_; }  // since the last finite step (not saved)
  // Skipped steps in a row after which no scale helps (from 65536, a scale of 2^-48): the gradients
  // are inf/NaN whatever the scale (an op that makes NaN, a float16 overflow in the forward).
  static constexpr int64_t kHopeless = 64;
  const LossScaleSettings& settings() const { return s_; }

  // A checkpoint's state (save: scale(), growth_tracker(), skipped()). std::invalid_argument for a
  // scale that is not finite and positive or a negative count.
  void restore(double scale, int64_t growth_tracker, int64_t skipped);

  // "dynamic loss scale (init 65536, x2 after 2000 good steps, x0.5 on inf/NaN gradients)" or
  // "fixed loss scale 1024".
  std::string describe() const;

 private:
  LossScaleSettings s_;
  float scale_;  // float32, as GradScaler's scale tensor
  int64_t tracker_ = 0, skipped_ = 0, in_a_row_ = 0;
};

}  // namespace meridian::train
