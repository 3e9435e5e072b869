// Parsing sizes given by users ("8", "64K", "16M", "1G"; powers of 1024).
#pragma once

#include <cstdint>
#include <string>

namespace meridian {

// Throws UserError naming `what` (an option or variable name) unless `text` is a positive size.
uint64_t parse_bytes(const std::string& text, const std::string& what);

}  // namespace meridian
