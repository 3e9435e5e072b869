// abort_job and its hooks (runtime.h): how a rank ends the whole job, and tells a watching launcher.
#include <fcntl.h>
#include <fmt/format.h>
#include <mpi.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>

#include "launcher.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/core/log.h"

namespace meridian::comm {

namespace {
std::mutex& hooks_mutex() {
  static std::mutex mu;
  return mu;
}
std::map<int, std::function<void()>>& hooks() {
  static std::map<int, std::function<void()>> h;
  return h;
}
}  // namespace

int detail::env_int(const char* name, int fallback, long min) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return (end && *end == '\0' && x >= min && x <= 1000000) ? static_cast<int>(x) : fallback;
}

int add_abort_hook(std::function<void()> hook) {
  static int next = 1;
  std::lock_guard<std::mutex> lock(hooks_mutex());
  hooks()[next] = std::move(hook);
  return next++;
}

void remove_abort_hook(int id) {
  std::lock_guard<std::mutex> lock(hooks_mutex());
  hooks().erase(id);
}

void detail::append_launcher_line(const char* variable, const std::string& what) {
  const char* path = std::getenv(variable);
  if (!path || !*path) return;
  const ProcessIdentity& id = process_identity();  // rank -1 before MPI is up
  const std::time_t now = std::time(nullptr);
  char when[32] = {0};
  std::strftime(when, sizeof(when), "%FT%TZ", std::gmtime(&now));
  const std::string line = fmt::format("{} rank {} host {} {}\n", when, id.rank, id.host, what);
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return;
  [[maybe_unused]] const ssize_t n = ::write(fd, line.data(), line.size());
  ::close(fd);
}

namespace {
void record_abort(const std::string& message, int exit_code) {
  detail::append_launcher_line("MERIDIAN_ABORT_FILE",
                               fmt::format("exit {}: {}", exit_code, message.substr(0, message.find('\n'))));
}
}  // namespace

void abort_job(const std::string& message, int exit_code) {
  static std::once_flag once;
  std::call_once(once, [&] {
    // meridian's logger shows critical messages on every rank's console and in the rank's log file;
    // before it is set up, plain stderr.
    if (log::initialized()) {
      spdlog::critical("{}", message);
      log::flush();
    } else {
      std::cerr << message << std::endl;
    }
    record_abort(message, exit_code);
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    const bool mpi_up = initialized && !finalized;
    if (mpi_up) {  // $MERIDIAN_LAUNCHER_GRACE_S: seconds before a launcher still waiting is ended
      detail::end_launcher_later(detail::env_int("MERIDIAN_LAUNCHER_GRACE_S", 30, 0), process_identity().rank,
                                 ("exit code " + std::to_string(exit_code)).c_str());
    }
    // MPI_Abort is entered once, by whichever comes first: the hooks done, or 10 s (a hook can block:
    // ncclCommAbort with a stuck network thread). It can block too (the launcher cannot reach a node
    // that lost its network): this process ends 10 s after entering it regardless.
    static std::atomic<bool> aborting{false};
    const auto mpi_abort = [exit_code, mpi_up] {
      if (aborting.exchange(true)) return;
      std::thread([exit_code] {
        std::this_thread::sleep_for(std::chrono::seconds(10));
        std::_Exit(exit_code);
      }).detach();
      if (mpi_up) MPI_Abort(MPI_COMM_WORLD, exit_code);
      std::_Exit(exit_code);
    };
    std::thread([mpi_abort] {
      std::this_thread::sleep_for(std::chrono::seconds(10));
      mpi_abort();
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // the other caller ends the process
    }).detach();
    {
      // Held while hooks run, so remove_abort_hook (a communicator being destroyed) waits for them.
      std::lock_guard<std::mutex> lock(hooks_mutex());
      for (auto& [id, hook] : hooks()) {
        try {
          hook();
        } catch (...) {
        }
      }
    }
    mpi_abort();
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  });
  // A second caller (another thread) waits here until the first one has ended the process.
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

}  // namespace meridian::comm
