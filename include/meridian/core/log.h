// Logging (spdlog). After init(), use spdlog::info/warn/error/... anywhere.
// Rank 0 logs to the console at the chosen level; other ranks print only warnings and errors to the
// console (so a failure on any rank is visible); every rank writes everything at the chosen level to
// <run_dir>/logs/rank_<r>.log when a run directory is given.
#pragma once

#include <string>

namespace meridian::log {

struct Options {
  std::string level = "info";  // trace, debug, info, warn, error, critical, off
  std::string run_dir;         // empty: no log files
};

// Not collective; call once per process (again to reconfigure). Throws UserError on an unknown
// level or an unwritable log directory (naming the path).
void init(int rank, const Options& options);

// Throws UserError unless `level` is one of the names above (checked while parsing options, before MPI).
void check_level(const std::string& level);

// True once init() has installed meridian's logger.
bool initialized();

// Flushes every sink; call before aborting.
void flush();

}  // namespace meridian::log
