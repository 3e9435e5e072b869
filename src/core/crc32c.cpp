#include "meridian/core/crc32c.h"

#include <array>

namespace meridian {

namespace {
constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1) ? 0x82F63B78u : 0u);
    table[i] = c;
  }
  return table;
}
constexpr auto kCrc32cTable = make_crc32c_table();

uint32_t crc32c_table(const uint8_t* p, size_t n, uint32_t crc) {
  for (size_t i = 0; i < n; ++i) crc = kCrc32cTable[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
// SSE4.2's crc32 instruction computes the same polynomial 8 bytes at a time (checkpoints checksum
// gigabytes: the table runs at about 0.4 GB/s here, this at several GB/s).
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const uint8_t* p, size_t n, uint32_t crc) {
  uint64_t c = crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    __builtin_memcpy(&word, p, 8);
    c = __builtin_ia32_crc32di(c, word);
  }
  crc = uint32_t(c);
  for (; n > 0; --n, ++p) crc = __builtin_ia32_crc32qi(crc, *p);
  return crc;
}
#endif
}  // namespace

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
#if defined(__x86_64__)
  static const bool sse42 = __builtin_cpu_supports("sse4.2");
  if (sse42) return ~crc32c_sse42(p, n, ~crc);
#endif
  return ~crc32c_table(p, n, ~crc);
}

uint32_t crc32c(const void* data, size_t n) { return crc32c_extend(0, data, n); }

}  // namespace meridian
