#include "meridian/core/log.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>

#include "meridian/core/error.h"

namespace meridian::log {

namespace {
bool g_initialized = false;
}

void check_level(const std::string& level) {
  if (spdlog::level::from_str(level) == spdlog::level::off && level != "off") {
    throw UserError("--log-level: unknown level '" + level +
                    "' (expected trace, debug, info, warn, error, critical or off)");
  }
}

bool initialized() { return g_initialized; }

void init(int rank, const Options& options) {
  check_level(options.level);
  const auto level = spdlog::level::from_str(options.level);
  const std::string pattern = "[%H:%M:%S.%e] [r" + std::to_string(rank) + "] [%^%l%$] %v";

  auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  console->set_level(rank == 0 ? level : std::max(level, spdlog::level::warn));
  console->set_pattern(pattern);
  std::vector<spdlog::sink_ptr> sinks{console};

  if (!options.run_dir.empty()) {
    const auto dir = std::filesystem::path(options.run_dir) / "logs";
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw UserError(dir.string() + ": cannot create log directory: " + ec.message());
    const auto file = (dir / ("rank_" + std::to_string(rank) + ".log")).string();
    try {
      auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(file, /*truncate=*/false);
      sink->set_level(level);
      sink->set_pattern(pattern);
      sinks.push_back(sink);
    } catch (const spdlog::spdlog_ex& e) {
      throw UserError(file + ": cannot open log file: " + e.what());
    }
  }
  auto logger = std::make_shared<spdlog::logger>("meridian", sinks.begin(), sinks.end());
  logger->set_level(level);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(logger);
  spdlog::flush_every(std::chrono::seconds(5));  // rank logs stay current in long runs
  g_initialized = true;
}

void flush() {
  if (auto logger = spdlog::default_logger()) logger->flush();
}

}  // namespace meridian::log
