#include "launcher.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace meridian::comm::detail {

namespace {

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Field 22 of /proc/PID/stat (start time in clock ticks since boot): with the pid, it names one
// process, not a later one that reuses the pid. Empty when the process is gone.
std::string start_time(pid_t pid) {
  const std::string stat = first_line("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');  // the command name may contain spaces; fields after it don't
  if (close == std::string::npos) return "";
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
  }
  return field;
}

// Single quotes for sh.
std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

void end_launcher_later(int grace_s, int rank, const char* reason) {
  if (grace_s <= 0) return;
  const pid_t launcher = getppid();
  const std::string name = first_line("/proc/" + std::to_string(launcher) + "/comm");
  static const std::set<std::string> kLaunchers = {"mpirun", "mpiexec", "orterun", "prterun", "orted", "prted"};
  if (!kLaunchers.count(name)) return;
  const std::string started = start_time(launcher);
  if (started.empty()) return;
  // The watcher is sh, so that nothing of this process (threads, MPI, CUDA) runs in it. `alive` is
  // true while the launcher is the same process. The message is appended to the launcher's own stderr
  // (the user's terminal or log file for mpirun, the remote shell for an orted), never sent through
  // this rank's output pipes, which the launcher waits on. (A file opened without O_APPEND (`>`) keeps
  // its writers' offset, and a shell's later "Killed" line there can overwrite it; `>>` cannot.)
  // SIGKILL, not SIGTERM: Open MPI 4.1's mpirun
  // handles SIGTERM in that state by crashing in PMIx_Finalize with a segmentation-fault report.
  const std::string message = fmt::format(
      "meridian: {} (pid {}) was still running {} s after rank {} ended the job ({}), waiting for a node it "
      "cannot reach: killing it (MERIDIAN_LAUNCHER_GRACE_S sets the wait, 0: never)",
      name, launcher, grace_s, rank, reason);
  const std::string script = fmt::format(R"sh(
alive() {{ [ "$(sed 's/.*) //' /proc/{pid}/stat 2>/dev/null | cut -d' ' -f20)" = {start} ]; }}
i=0; while [ $i -lt {grace} ]; do alive || exit 0; sleep 1; i=$((i+1)); done
echo {message} >>/proc/{pid}/fd/2 2>/dev/null
kill -KILL {pid} 2>/dev/null
)sh",
                                         fmt::arg("pid", launcher), fmt::arg("start", started),
                                         fmt::arg("grace", grace_s), fmt::arg("message", quoted(message)));
  rlimit files{};
  const int max_fd = getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY
                         ? static_cast<int>(std::min<rlim_t>(files.rlim_cur, 1 << 20))
                         : 4096;
  const pid_t child = fork();
  if (child != 0) return;  // the rank goes on (or fork failed: nothing to do)
  // In the child of a multi-threaded process: only async-signal-safe calls until exec.
  setsid();  // out of the rank's process group, which the launcher signals when it kills the rank
  const int null_fd = open("/dev/null", O_RDWR);
  if (null_fd >= 0) {
    dup2(null_fd, 0);
    dup2(null_fd, 1);
    dup2(null_fd, 2);
  }
  for (int fd = 3; fd < max_fd; ++fd) close(fd);
  execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
  _exit(127);
}

}  // namespace meridian::comm::detail
