// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), written by hand (table-driven): the
// checksum of TensorBoard records and of checkpoint blocks. crc32c("123456789", 9) == 0xE3069283.
#pragma once

#include <cstddef>
#include <cstdint>

namespace meridian {

uint32_t crc32c(const void* data, size_t n);
// The CRC-32C of a message whose first part had `crc` and whose next n bytes are `data`:
// crc32c_extend(crc32c(a, na), b, nb) == crc32c(a || b). crc32c_extend(0, data, n) == crc32c(data, n).
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);

}  // namespace meridian
