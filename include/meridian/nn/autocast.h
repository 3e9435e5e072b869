// The autocast state (enabled, lower-precision dtype) of one device type, read and set through the
// LibTorch API of either generation (2.4 and later: per device type; 1.13: CPU and CUDA calls).
// The Trainer's bf16 scope sets it; activation checkpointing (nn/blocks.h) captures it in
// forward and puts it back for the recomputation in backward. Not collective; thread-local state.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace meridian::nn {

struct AutocastState {
  bool enabled = false;
  at::ScalarType dtype = at::kBFloat16;

  static AutocastState of(c10::DeviceType device) {
    AutocastState s;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    s.enabled = at::autocast::is_autocast_enabled(device);
    s.dtype = at::autocast::get_autocast_dtype(device);
#else
    s.enabled = device == c10::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
    s.dtype = device == c10::kCUDA ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
#endif
    return s;
  }
  void apply(c10::DeviceType device) const {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_dtype(device, dtype);
    at::autocast::set_autocast_enabled(device, enabled);
#else
    if (device == c10::kCUDA) {
      at::autocast::set_autocast_gpu_dtype(dtype);
      at::autocast::set_enabled(enabled);
    } else {
      at::autocast::set_autocast_cpu_dtype(dtype);
      at::autocast::set_cpu_enabled(enabled);
    }
#endif
  }
};

}  // namespace meridian::nn
