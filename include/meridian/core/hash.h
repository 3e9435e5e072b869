// Deterministic mixing for seeds and keys (splitmix64): the same value on every machine and compiler,
// unlike std::hash or the standard distributions. Samplers, loaders and generators derive their
// randomness from it so that a seed reproduces a run exactly.
#pragma once

#include <cstddef>
#include <cstdint>

namespace meridian {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// FNV-1a over bytes, continuing from `h`: a content fingerprint that is the same on every machine.
inline constexpr uint64_t kFnvOffset = 1469598103934665603ull;
inline uint64_t fnv1a(const void* data, size_t bytes, uint64_t h = kFnvOffset) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Uniform in [0, 1) from a state advanced by splitmix64.
inline double next_unit(uint64_t& state) { return double((state = splitmix64(state)) >> 11) * 0x1.0p-53; }

}  // namespace meridian
