// Who uses this machine's CPUs, read from Linux's /proc: the time of all CPUs (busy, idle, stolen by a
// hypervisor), the threads runnable now, and the CPU time of each process. What the runtime's thread
// choice, doctor and health measure a shared CPU with. Not collective, any thread; nothing here throws
// for an unreadable /proc file (its readings are then zero and `readable` false).
#pragma once

#include <cstdint>
#include <istream>
#include <map>
#include <string>
#include <vector>

namespace meridian::core {

// When a machine's CPU counts as shared, alike for the runtime's thread choice, doctor's cpu check and
// health's straggler cause:
inline constexpr double kSharedStealPct = 5;          // the hypervisor stole at least this % of the CPUs' time
inline constexpr double kSharedOthersCores = 0.5;     // other processes kept this many cores busy (a shell does not)
inline constexpr double kSharedRunnableExcess = 0.5;  // runnable threads (a mean of samples) above cores + this

// One reading of /proc/stat's totals, in clock ticks since boot.
struct CpuTimes {
  uint64_t busy = 0;   // user + nice + system + irq + softirq (guest time is inside user)
  uint64_t idle = 0;   // idle + iowait
  uint64_t steal = 0;  // a VM's vCPUs wanted to run but the hypervisor ran something else (VMware, KVM)
  int cpus = 0;        // the cpuN lines: CPUs online
  int running = 0;     // procs_running: threads runnable at that moment, the reader included
  bool readable = false;
};
// The "cpu" line, the cpuN lines and procs_running of a /proc/stat text.
CpuTimes parse_proc_stat(std::istream& in);
CpuTimes read_cpu_times();

// The machine's CPU use between two readings.
struct CpuUse {
  double busy_cores = 0;  // CPUs busy on average (every process)
  double steal_pct = 0;   // of the CPUs' time, stolen by the hypervisor
};
CpuUse cpu_use(const CpuTimes& before, const CpuTimes& after);

// utime + stime, in ticks, of a /proc/<pid>/stat line (every thread of the process); -1 when the line is
// not one. `command` gets the name between the parentheses (which may itself hold spaces and ')').
int64_t parse_pid_stat_ticks(const std::string& line, std::string* command = nullptr);
// That of process `pid`; -1 when it is gone or unreadable.
int64_t process_ticks(int pid, std::string* command = nullptr);

// The kernel's boot id (/proc/sys/kernel/random/boot_id): processes that print the same one share a
// machine and its cores, whatever host names their network namespaces or containers give them. Empty
// when unreadable.
std::string boot_id();

// Another process's use of the CPUs over a window.
struct ProcessUse {
  int pid = 0;
  std::string command;
  double cores = 0;  // CPUs it kept busy on average
};

// What shares this machine's CPUs with a set of processes ("ours": the job's ranks on it), over a window.
struct CpuShare {
  int cpus = 0;
  double seconds = 0;
  double busy_cores = 0;    // every process
  double others_cores = 0;  // processes other than ours (busy_cores minus ours, at least 0)
  double steal_pct = 0;
  double runnable = 0;             // threads runnable, the mean of the window's samples (at its close without any)
  std::vector<ProcessUse> others;  // the busiest other processes, busiest first (with list_processes)
  bool readable = false;
};

// A window of CPU use: open it, later close it. Not thread-safe.
class CpuWindow {
 public:
  // Reads /proc/stat and our processes' CPU time (and, with list_processes, every process's).
  void open(const std::vector<int>& ours, bool list_processes = false);
  // Adds a sample of the threads runnable now (runnable_threads) to the window's mean.
  void sample_runnable();
  // The share since open(); the 5 busiest other processes above 0.05 cores with list_processes.
  CpuShare close() const;

 private:
  std::vector<int> ours_;
  bool list_ = false;
  CpuTimes times_;
  int64_t ours_ticks_ = 0;
  double runnable_sum_ = 0;
  int runnable_samples_ = 0;
  double opened_ = 0;             // steady clock, seconds
  std::map<int, int64_t> ticks_;  // every process's, with list_processes
};

// Opens a window, sleeps `seconds` (sampling the runnable threads every 50 ms), closes it.
CpuShare sample_cpu_share(double seconds, const std::vector<int>& ours, bool list_processes = false);

// The threads runnable now (the numerator of /proc/loadavg's fourth field, the reader included); -1 when
// unreadable. Cheaper than a /proc/stat reading: one short line.
int runnable_threads();

}  // namespace meridian::core
