// Shared by tests that compare a result with a reference computed another way.
#pragma once

#include <ATen/ATen.h>

namespace meridian::test {

// |a - b| / |b| in Frobenius norms, computed in float64 (a zero reference gives inf or NaN: a failure).
inline double relative_error(const at::Tensor& a, const at::Tensor& b) {
  const auto a64 = a.to(at::kDouble), b64 = b.to(at::kDouble);
  return (a64 - b64).norm().item<double>() / b64.norm().item<double>();
}

}  // namespace meridian::test
