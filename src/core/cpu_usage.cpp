#include "meridian/core/cpu_usage.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace meridian::core {

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double ticks_per_second() {
  static const double hz = [] {
    const long t = sysconf(_SC_CLK_TCK);
    return t > 0 ? double(t) : 100.0;
  }();
  return hz;
}

// Every process in /proc: pid -> its CPU ticks.
std::map<int, int64_t> all_process_ticks() {
  std::map<int, int64_t> out;
  DIR* dir = opendir("/proc");
  if (!dir) return out;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (!end || *end != '\0' || pid <= 0) continue;
    const int64_t t = process_ticks(int(pid));
    if (t >= 0) out[int(pid)] = t;
  }
  closedir(dir);
  return out;
}

}  // namespace

CpuTimes parse_proc_stat(std::istream& in) {
  CpuTimes t;
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string key;
    words >> key;
    if (key == "cpu") {
      uint64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
      words >> user >> nice >> system >> idle >> iowait >> irq >> softirq;
      if (!words) return {};
      words >> steal;  // absent before Linux 2.6.11
      t.busy = user + nice + system + irq + softirq;
      t.idle = idle + iowait;
      t.steal = words ? steal : 0;
      t.readable = true;
    } else if (key.rfind("cpu", 0) == 0 && key.size() > 3) {
      ++t.cpus;
    } else if (key == "procs_running") {
      words >> t.running;
    }
  }
  return t;
}

CpuTimes read_cpu_times() {
  std::ifstream in("/proc/stat");
  return in ? parse_proc_stat(in) : CpuTimes{};
}

CpuUse cpu_use(const CpuTimes& a, const CpuTimes& b) {
  CpuUse u;
  if (!a.readable || !b.readable || b.busy < a.busy || b.idle < a.idle || b.steal < a.steal) return u;
  const double busy = double(b.busy - a.busy), idle = double(b.idle - a.idle), steal = double(b.steal - a.steal);
  const double all = busy + idle + steal;
  if (all <= 0) return u;
  const int cpus = std::max(1, b.cpus);
  u.busy_cores = cpus * busy / all;
  u.steal_pct = 100 * steal / all;
  return u;
}

int64_t parse_pid_stat_ticks(const std::string& line, std::string* command) {
  const auto open = line.find('('), close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return -1;
  if (command) *command = line.substr(open + 1, close - open - 1);
  // After the name: state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime.
  std::istringstream fields(line.substr(close + 1));
  std::string skip;
  for (int i = 0; i < 11; ++i) fields >> skip;
  int64_t utime = -1, stime = -1;
  fields >> utime >> stime;
  return fields && utime >= 0 && stime >= 0 ? utime + stime : -1;
}

int64_t process_ticks(int pid, std::string* command) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!in || !std::getline(in, line)) return -1;
  return parse_pid_stat_ticks(line, command);
}

std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  in >> id;
  return id;
}

void CpuWindow::open(const std::vector<int>& ours, bool list_processes) {
  ours_ = ours, list_ = list_processes;
  ours_ticks_ = 0;
  for (int pid : ours_) ours_ticks_ += std::max<int64_t>(0, process_ticks(pid));
  ticks_ = list_ ? all_process_ticks() : std::map<int, int64_t>{};
  runnable_sum_ = 0, runnable_samples_ = 0;
  times_ = read_cpu_times();
  opened_ = now_s();
}

void CpuWindow::sample_runnable() {
  const int n = runnable_threads();
  if (n >= 0) runnable_sum_ += n, ++runnable_samples_;
}

CpuShare CpuWindow::close() const {
  const CpuTimes after = read_cpu_times();
  CpuShare s;
  s.seconds = now_s() - opened_;
  s.cpus = after.cpus;
  s.readable = times_.readable && after.readable && s.seconds > 0;
  if (!s.readable) return s;
  const CpuUse use = cpu_use(times_, after);
  s.busy_cores = use.busy_cores, s.steal_pct = use.steal_pct;
  s.runnable = runnable_samples_ > 0 ? runnable_sum_ / runnable_samples_ : after.running;
  int64_t ours = 0;
  for (int pid : ours_) ours += std::max<int64_t>(0, process_ticks(pid));
  const double ours_cores = double(std::max<int64_t>(0, ours - ours_ticks_)) / ticks_per_second() / s.seconds;
  s.others_cores = std::max(0.0, s.busy_cores - ours_cores);
  if (!list_) return s;
  for (const auto& [pid, ticks] : all_process_ticks()) {
    if (std::find(ours_.begin(), ours_.end(), pid) != ours_.end()) continue;
    const auto before = ticks_.find(pid);
    const int64_t used = ticks - (before == ticks_.end() ? 0 : before->second);
    const double cores = double(used) / ticks_per_second() / s.seconds;
    if (cores < 0.05) continue;
    ProcessUse p{pid, "", cores};
    process_ticks(pid, &p.command);
    s.others.push_back(p);
  }
  std::sort(s.others.begin(), s.others.end(), [](const auto& a, const auto& b) { return a.cores > b.cores; });
  if (s.others.size() > 5) s.others.resize(5);
  return s;
}

CpuShare sample_cpu_share(double seconds, const std::vector<int>& ours, bool list_processes) {
  CpuWindow w;
  w.open(ours, list_processes);
  const double end = now_s() + seconds;
  for (double left = seconds; left > 0; left = end - now_s()) {
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(left, 0.05)));
    w.sample_runnable();
  }
  return w.close();
}

int runnable_threads() {
  std::ifstream in("/proc/loadavg");
  double l1 = 0, l5 = 0, l15 = 0;
  int running = -1;
  char slash = 0;
  in >> l1 >> l5 >> l15 >> running >> slash;
  return in && slash == '/' ? running : -1;
}

}  // namespace meridian::core
