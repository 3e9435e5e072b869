// Parsing sizes given by users: "8", "64K", "16M", "1G" (also KiB, MiB, GiB: powers of 1024) or
// "500KB", "100MB", "5GB" (powers of 1000, as transformers' max_shard_size).
#pragma once

#include <cstdint>
#include <string>

namespace meridian {

// Throws UserError naming `what` (an option or variable name) unless `text` is a positive size.
uint64_t parse_bytes(const std::string& text, const std::string& what);

}  // namespace meridian
