// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), written by hand (table-driven): the
// checksum of TensorBoard records and of checkpoint blocks. crc32c("123456789", 9) == 0xE3069283.
#pragma once

#include <cstddef>
#include <cstdint>

namespace meridian {

uint32_t crc32c(const void* data, size_t n);

}  // namespace meridian
