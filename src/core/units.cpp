#include "meridian/core/units.h"

#include <cmath>

#include "meridian/core/error.h"

namespace meridian {

uint64_t parse_bytes(const std::string& text, const std::string& what) {
  const auto bad = [&](const std::string& why) {
    return UserError(what + ": '" + text + "' " + why + " (expected a size such as 8, 64K, 16M, 1G or 5GB)");
  };
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (...) {
    throw bad("is not a size");
  }
  const std::string unit = text.substr(pos);
  double scale = 1;
  if (unit == "K" || unit == "k" || unit == "KiB")
    scale = 1024.0;
  else if (unit == "M" || unit == "m" || unit == "MiB")
    scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "g" || unit == "GiB")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "KB" || unit == "kB")  // decimal, as transformers' max_shard_size "5GB"
    scale = 1e3;
  else if (unit == "MB")
    scale = 1e6;
  else if (unit == "GB")
    scale = 1e9;
  else if (!unit.empty())
    throw bad("has an unknown unit");
  const double bytes = v * scale;
  if (!std::isfinite(bytes) || bytes < 1 || bytes > 1e18) throw bad("is out of range");
  return static_cast<uint64_t>(bytes);
}

}  // namespace meridian
