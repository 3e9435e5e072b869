// The wall clock as written into the run's files (attempts.jsonl, health.jsonl, run.json, TensorBoard
// events, the report): seconds since the Unix epoch, with fractions. Durations use steady_clock.
#pragma once

#include <chrono>

namespace meridian {

// Not collective: seconds since 1970-01-01 UTC on this host's clock (hosts' clocks may differ).
inline double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace meridian
