#include "reduce_kernels.h"

#include <c10/util/Half.h>

#include <cstring>
#include <stdexcept>
#include <string>

namespace meridian::comm::detail {

namespace {

template <typename T>
void sum_plain(T* __restrict dst, const T* __restrict src, int64_t count) {
  for (int64_t i = 0; i < count; ++i) dst[i] += src[i];
}

inline float bf16_to_float(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Round to nearest even; NaN stays a (quiet) NaN, as c10::BFloat16 does it.
inline uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  const bool nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  return nan ? uint16_t(0x7FC0) : uint16_t(rounded);
}

}  // namespace

void sum_into_bf16(uint16_t* __restrict dst, const uint16_t* __restrict src, int64_t count) {
  for (int64_t i = 0; i < count; ++i) dst[i] = float_to_bf16(bf16_to_float(dst[i]) + bf16_to_float(src[i]));
}

bool has_sum_kernel(at::ScalarType type) {
  return type == at::kFloat || type == at::kDouble || type == at::kBFloat16 || type == at::kHalf;
}

void sum_into(at::ScalarType type, void* dst, const void* src, int64_t count) {
  switch (type) {
    case at::kFloat:
      return sum_plain(static_cast<float*>(dst), static_cast<const float*>(src), count);
    case at::kDouble:
      return sum_plain(static_cast<double*>(dst), static_cast<const double*>(src), count);
    case at::kBFloat16:
      return sum_into_bf16(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), count);
    case at::kHalf: {
      auto* d = static_cast<c10::Half*>(dst);
      const auto* s = static_cast<const c10::Half*>(src);
      for (int64_t i = 0; i < count; ++i) d[i] = c10::Half(static_cast<float>(d[i]) + static_cast<float>(s[i]));
      return;
    }
    default:
      throw std::invalid_argument(std::string("sum_into: no kernel for ") + c10::toString(type));
  }
}

}  // namespace meridian::comm::detail
