// CRC-32C against a bit-by-bit reference (the polynomial applied one bit at a time), on buffers of
// every length up to 300 bytes and at odd offsets, so the 8-byte hardware path and its byte tail
// are both covered; plus the standard check value.
#include "meridian/core/crc32c.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "meridian/core/hash.h"

namespace {
uint32_t bitwise_crc32c(const uint8_t* p, size_t n) {
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}
}  // namespace

TEST(Crc32c, CheckValue) { EXPECT_EQ(meridian::crc32c("123456789", 9), 0xE3069283u); }

TEST(Crc32c, MatchesBitwiseReferenceAtEveryLengthAndOffset) {
  std::vector<uint8_t> data(400);
  uint64_t state = 7;
  for (auto& b : data) b = uint8_t(meridian::splitmix64(state++) >> 56);
  for (size_t offset = 0; offset < 8; offset += 3)
    for (size_t n = 0; n <= 300; ++n)
      ASSERT_EQ(meridian::crc32c(data.data() + offset, n), bitwise_crc32c(data.data() + offset, n))
          << offset << " " << n;
}

TEST(Crc32c, ExtendContinuesAMessageAtAnySplit) {
  std::vector<uint8_t> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 131 + 7);
  const uint32_t whole = bitwise_crc32c(data.data(), data.size());
  for (size_t split : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(500), size_t(999), size_t(1000)}) {
    const uint32_t first = meridian::crc32c(data.data(), split);
    EXPECT_EQ(meridian::crc32c_extend(first, data.data() + split, data.size() - split), whole) << "split " << split;
  }
}
