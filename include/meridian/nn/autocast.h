// The autocast state (enabled, lower-precision dtype) of one device type, read and set through
// LibTorch's per-device-type API (2.4 and later).
// AutocastScope below sets it; activation checkpointing (nn/blocks.h) captures it in
// forward and puts it back for the recomputation in backward. Not collective; thread-local state.
#pragma once

#include <ATen/autocast_mode.h>

namespace meridian::nn {

struct AutocastState {
  bool enabled = false;
  at::ScalarType dtype = at::kBFloat16;

  static AutocastState of(c10::DeviceType device) {
    AutocastState s;
    s.enabled = at::autocast::is_autocast_enabled(device);
    s.dtype = at::autocast::get_autocast_dtype(device);
    return s;
  }
  void apply(c10::DeviceType device) const {
    at::autocast::set_autocast_dtype(device, dtype);
    at::autocast::set_autocast_enabled(device, enabled);
  }
};

// Autocast on `device` set while alive, the state before put back at its end: (true, dtype) for
// bfloat16 or float16 compute in a training step or an inference command (dtype kFloat: autocast
// off), or (false) for a float32 region inside one (a loss). Leaving the outermost enabled scope
// clears the cache of casted weights (it would otherwise hold the weights of before an update into
// the next step). Not collective; thread-local state.
class AutocastScope {
 public:
  // Off for kFloat, else on in `dtype` (kBFloat16 or kHalf).
  AutocastScope(c10::DeviceType device, at::ScalarType dtype)
      : AutocastScope(device, dtype != at::kFloat, dtype == at::kFloat ? at::kBFloat16 : dtype) {}
  AutocastScope(c10::DeviceType device, bool enabled, at::ScalarType dtype = at::kBFloat16)
      : device_(device), before_(AutocastState::of(device)) {
    now_ = {enabled, dtype};
    now_.apply(device_);
  }
  ~AutocastScope() {
    before_.apply(device_);
    if (now_.enabled && !before_.enabled) at::autocast::clear_cache();
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType device_;
  AutocastState before_, now_;
};

}  // namespace meridian::nn
