// core/cpu_usage: /proc/stat and /proc/<pid>/stat readings (steal time cannot be produced on this
// machine: it is read from samples in /proc/stat's format, as a KVM or VMware guest reports it), and a
// window over this machine with a busy child process in it.
#include "meridian/core/cpu_usage.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <sstream>
#include <thread>

using namespace meridian::core;

namespace {

// A 4-vCPU guest's /proc/stat: user nice system idle iowait irq softirq steal guest guest_nice.
const char* kBefore =
    "cpu  10000 50 3000 80000 400 0 150 2000 0 0\n"
    "cpu0 2500 10 750 20000 100 0 40 500 0 0\n"
    "cpu1 2500 10 750 20000 100 0 40 500 0 0\n"
    "cpu2 2500 20 750 20000 100 0 30 500 0 0\n"
    "cpu3 2500 10 750 20000 100 0 40 500 0 0\n"
    "intr 123456 0 9 0 0 0 0 0 0 1 0 0 0 0\n"
    "ctxt 987654\n"
    "btime 1764900000\n"
    "processes 4321\n"
    "procs_running 3\n"
    "procs_blocked 0\n"
    "softirq 5555 0 1 2 3 4 5 6 7 8 9\n";
// 1 s later (100 ticks per CPU per second, 400 in all): 200 busy, 140 idle, 10 iowait, 50 stolen.
const char* kAfter =
    "cpu  10150 50 3040 80140 410 0 160 2050 0 0\n"
    "cpu0 2540 10 760 20035 102 0 42 512 0 0\n"
    "cpu1 2540 10 760 20035 102 0 42 512 0 0\n"
    "cpu2 2530 20 760 20035 103 0 34 513 0 0\n"
    "cpu3 2540 10 760 20035 103 0 42 513 0 0\n"
    "intr 123999 0 9 0 0 0 0 0 0 1 0 0 0 0\n"
    "procs_running 5\n";

CpuTimes parse(const char* text) {
  std::istringstream in(text);
  return parse_proc_stat(in);
}

}  // namespace

TEST(CpuUsage, ParsesProcStat) {
  const CpuTimes t = parse(kBefore);
  ASSERT_TRUE(t.readable);
  EXPECT_EQ(t.busy, 10000u + 50 + 3000 + 0 + 150);
  EXPECT_EQ(t.idle, 80000u + 400);
  EXPECT_EQ(t.steal, 2000u);
  EXPECT_EQ(t.cpus, 4);
  EXPECT_EQ(t.running, 3);
}

TEST(CpuUsage, BusyCoresAndStealBetweenTwoReadings) {
  const CpuUse u = cpu_use(parse(kBefore), parse(kAfter));
  // 200 busy ticks of 400 (200 + 150 idle + 50 stolen) on 4 CPUs: 2 cores; 50 of 400 stolen: 12.5 %.
  EXPECT_DOUBLE_EQ(u.busy_cores, 2.0);
  EXPECT_DOUBLE_EQ(u.steal_pct, 12.5);
}

TEST(CpuUsage, OldKernelsWithoutStealAndUnreadableTexts) {
  const CpuTimes old = parse("cpu  100 0 50 1000 0 0 0\ncpu0 100 0 50 1000 0 0 0\n");
  ASSERT_TRUE(old.readable);
  EXPECT_EQ(old.steal, 0u);
  EXPECT_EQ(old.busy, 150u);
  EXPECT_FALSE(parse("").readable);
  EXPECT_FALSE(parse("cpu  12 x\n").readable);
  // Nothing to compare: zeros, not a division by zero or a wrapped counter.
  const CpuUse none = cpu_use(parse(""), parse(kAfter));
  EXPECT_EQ(none.busy_cores, 0);
  EXPECT_EQ(cpu_use(parse(kAfter), parse(kBefore)).busy_cores, 0);  // counters that went back: no reading
}

TEST(CpuUsage, ParsesAProcessStatLineWhoseNameHoldsParentheses) {
  std::string command;
  const std::string line =
      "4242 (my (odd) proc) R 1 4242 4242 0 -1 4194304 100 0 0 0 1234 567 0 0 20 0 3 0 1239705 3133440 382";
  EXPECT_EQ(parse_pid_stat_ticks(line, &command), 1234 + 567);
  EXPECT_EQ(command, "my (odd) proc");
  EXPECT_EQ(parse_pid_stat_ticks("not a stat line"), -1);
  EXPECT_EQ(parse_pid_stat_ticks("1 (x) R 1 2"), -1);  // cut short
}

TEST(CpuUsage, ThisMachine) {
  EXPECT_EQ(boot_id().size(), 36u);  // a UUID
  EXPECT_GE(runnable_threads(), 1);  // this thread
  const CpuTimes t = read_cpu_times();
  ASSERT_TRUE(t.readable);
  EXPECT_EQ(t.cpus, int(std::thread::hardware_concurrency()));
  EXPECT_GE(process_ticks(getpid()), 0);
  EXPECT_EQ(process_ticks(-5), -1);
}

TEST(CpuUsage, AWindowNamesABusyProcessThatIsNotOurs) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0)
    for (volatile uint64_t i = 0;; i = i + 1) {
    }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // started spinning
  const CpuShare mine = sample_cpu_share(0.5, {getpid()}, true);
  const CpuShare with_child = sample_cpu_share(0.5, {getpid(), int(child)}, true);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_TRUE(mine.readable);
  EXPECT_GT(mine.seconds, 0.45);
  EXPECT_GE(mine.runnable, 1.0);
  // The child keeps a core busy (under the suite's other tests, at least a fifth of one).
  bool named = false;
  for (const auto& p : mine.others) named = named || (p.pid == child && p.cores > 0.2);
  EXPECT_TRUE(named) << "the busy child is not among the busiest other processes";
  EXPECT_GT(mine.others_cores, 0.2);
  for (const auto& p : with_child.others) EXPECT_NE(p.pid, child) << "counted as another process while ours";
}
