// The health monitor of a running job (the Trainer's train.health_every, default 100 steps).
//
// Every rank accumulates its own step times; every `every` steps all ranks send rank 0 their means
// (step, data wait, communication: the time blocked waiting for other ranks), the compute left over
// (the median step's, robust to one hiccup), resident memory, GPU memory / utilisation / temperature
// when NVML is there, and the latency of a small allreduce probe. Rank 0 appends one JSON line to
// <run_dir>/health.jsonl and warns, naming host and rank, when
//   * a rank is a straggler: its compute time (step minus data wait minus communication: in
//     data-parallel lockstep every rank's step takes as long as the slowest, the others wait in
//     collectives, wherever in the step they are) is over 1.3x the median of the other ranks' and at least 5 ms
//     above it. When its machine's CPU was shared over the interval, the warning names that as the
//     cause: the hypervisor's steal time, more runnable threads than cores, other processes' load
//     (core/cpu_usage; a shared core slows a rank far more than its share when threads spin, see
//     comm::choose_threads);
//   * a rank's resident memory grew in each of the last 5 reports, by more than 10 % in all;
//   * data wait exceeds 20 % of a rank's step (the loader cannot keep up);
//   * across nodes, a node's links are slow: each report also measures the links between nodes (one
//     rank per node, ops::measure_links with 1 MiB messages) and names a node whose best link is
//     much slower than the links between the others ("network: ..."), as doctor does. In data-parallel
//     lockstep a slow link makes every rank wait alike, so the step times cannot name it.
// report() is collective (a gather and the probes); call it at the same steps on every rank.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "meridian/core/cpu_usage.h"
#include "meridian/ops/facts.h"

namespace meridian::comm {
class Runtime;
class Communicator;
}  // namespace meridian::comm

namespace meridian::ops {

// One optimizer step as the trainer timed it, in seconds.
struct StepSeconds {
  double step = 0;  // the whole step
  double data = 0;  // waiting for the next batch
  double comm = 0;  // waiting for other ranks in communication (not hidden behind compute)
};

// One rank's step times over a report interval: record() each step, read the summary at the report,
// clear() for the next. Not thread-safe.
class StepInterval {
 public:
  void record(const StepSeconds& t);
  // The mean step, data wait and communication over the steps recorded; zeros when none.
  StepSeconds mean() const;
  // The median step's compute (step minus data wait minus communication, at least 0): one hiccup of
  // a shared core does not move it. 0 when no step was recorded.
  double compute() const;
  void clear();

 private:
  double step_ = 0, data_ = 0, comm_ = 0;
  int64_t steps_ = 0;
  std::vector<double> compute_;  // per step
};

// One rank's report interval as rank 0 judges it (what report() gathers from every rank).
struct RankInterval {
  int rank = 0;
  std::string host;
  double step_s = 0, data_s = 0;  // mean step and data wait over the interval
  double compute_s = 0;           // the median step's compute (step minus data wait minus communication)
  double rss_mb = 0;              // resident memory at the report
  // Its machine's CPU over the interval (core::CpuShare): cores, the steal time, the mean runnable
  // threads sampled after each step, and the cores other processes (not the job's) kept busy.
  int cores = 0;
  double steal_pct = 0, runnable = 0, others_cores = 0;
  // The job's ranks outnumber its machine's free cores (comm::ThreadChoice::oversubscribed), and what
  // meridian did about it (comm::Runtime::mpi_waits).
  bool oversubscribed = false;
  std::string mpi_waits;
};

// Why a rank's CPU was slow over an interval, when it was shared: "CPU shared: 12 % steal (...)",
// "CPU shared: 3.0 runnable threads on 2 cores (...)" or "CPU shared: other processes kept 1.0 of 2
// cores busy"; empty when none of them (steal >= 5 %, runnable threads above cores + 0.5, others' load
// >= 0.5 cores) was measured.
std::string cpu_shared_cause(const RankInterval& r);

// Rank 0's rules over successive reports (the straggler, data wait and memory rules above), apart
// from the gathering so that they can be fed made-up intervals. No MPI, not thread-safe. Remembers,
// per rank, whether it was over the straggler threshold in the last report and its resident memory
// in the last 6 reports.
class HealthRules {
 public:
  // This report's warnings, rank by rank in the order given (for each: straggler, data wait, memory).
  // A straggler needs more than one rank and to be slow in this report and the one before.
  std::vector<std::string> judge(const std::vector<RankInterval>& ranks);

 private:
  std::map<int, std::vector<double>> rss_history_;  // resident MB per report, per rank
  std::map<int, bool> slow_before_;                 // above the straggler threshold in the last report
  std::set<std::string> oversubscribed_;            // hosts already named oversubscribed (once per run)
};

class HealthMonitor {
 public:
  // Not collective. `control`: a CPU communicator every rank shares, for the probe; it and `runtime`
  // must outlive the monitor. `run_dir` empty: warnings only, no health.jsonl. Throws SystemError on
  // rank 0 when health.jsonl cannot be opened.
  HealthMonitor(const comm::Runtime& runtime, comm::Communicator& control, const std::string& run_dir);
  ~HealthMonitor();

  // Not collective; the thread that calls report().
  void record(const StepSeconds& t);
  // Collective: every rank calls it at the same steps (a gather and the allreduce probe on `control`).
  // Returns the warnings on rank 0 (empty elsewhere), also logged; starts the next interval.
  // `shares`: the batch shares in force (train.balance), logged with the report and written to
  // health.jsonl; empty: not balancing.
  std::vector<std::string> report(int64_t step, const std::string& shares = "");

 private:
  const comm::Runtime& rt_;
  comm::Communicator& control_;
  std::ofstream file_;
  std::string path_;
  StepInterval interval_;         // this rank's, since the last report
  core::CpuWindow cpu_;           // this rank's machine, since the last report
  HealthRules rules_;             // rank 0's
  std::vector<RankFacts> ranks_;  // rank, host, local rank of every rank (for the link probe)
  std::set<int> slow_links_;      // rank 0's: the ranks whose links were all slow in the last report
  static constexpr uint64_t kLinkProbeBytes = 1 << 20;
  static constexpr int kLinkProbeIters = 2;
};

}  // namespace meridian::ops
