#include "meridian/ops/health.h"

#include <ATen/ATen.h>
#include <dlfcn.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

#include "meridian/comm/communicator.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/clock.h"
#include "meridian/core/error.h"
#include "meridian/core/stats.h"
#include "meridian/ops/checks.h"
#include "meridian/ops/network_check.h"

namespace meridian::ops {

namespace {

double resident_mb() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long pages = 0, resident = 0;
  const int n = std::fscanf(f, "%ld %ld", &pages, &resident);
  std::fclose(f);
  return n == 2 ? double(resident) * double(sysconf(_SC_PAGESIZE)) / 1e6 : 0;
}

// NVML, loaded at run time when the driver provides it (no link dependency; absent on CPU nodes).
struct Nvml {
  using Init = int (*)();
  using Handle = int (*)(unsigned, void**);
  struct Memory {
    unsigned long long total, free, used;
  };
  struct Utilization {
    unsigned gpu, memory;
  };
  using MemoryInfo = int (*)(void*, Memory*);
  using Util = int (*)(void*, Utilization*);
  using Temperature = int (*)(void*, int, unsigned*);
  Handle handle = nullptr;
  MemoryInfo memory = nullptr;
  Util utilization = nullptr;
  Temperature temperature = nullptr;
  bool ok = false;

  Nvml() {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    auto init = reinterpret_cast<Init>(dlsym(lib, "nvmlInit_v2"));
    handle = reinterpret_cast<Handle>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
    memory = reinterpret_cast<MemoryInfo>(dlsym(lib, "nvmlDeviceGetMemoryInfo"));
    utilization = reinterpret_cast<Util>(dlsym(lib, "nvmlDeviceGetUtilizationRates"));
    temperature = reinterpret_cast<Temperature>(dlsym(lib, "nvmlDeviceGetTemperature"));
    ok = init && handle && memory && utilization && temperature && init() == 0;
  }

  // GPU `index`'s memory use, utilisation and temperature; null when unavailable.
  nlohmann::json stats(int index) const {
    void* device = nullptr;
    Memory m{};
    Utilization u{};
    unsigned celsius = 0;
    if (!ok || handle(unsigned(index), &device) != 0 || memory(device, &m) != 0 || utilization(device, &u) != 0 ||
        temperature(device, 0 /* NVML_TEMPERATURE_GPU */, &celsius) != 0)
      return nullptr;
    return {{"memory_used_mb", double(m.used) / 1e6},
            {"memory_total_mb", double(m.total) / 1e6},
            {"utilization_pct", u.gpu},
            {"temperature_c", celsius}};
  }
};

const Nvml& nvml() {
  static const Nvml instance;
  return instance;
}

}  // namespace

std::string cpu_shared_cause(const RankInterval& r) {
  // Every cause measured, not the first: a hypervisor's steal and another tenant's threads can come
  // together, and the user acts on each differently.
  std::vector<std::string> causes;
  if (r.steal_pct >= core::kSharedStealPct)
    causes.push_back(fmt::format("{:.0f} % steal (the hypervisor ran other VMs on this VM's cores)", r.steal_pct));
  if (r.cores > 0 && r.runnable > r.cores + core::kSharedRunnableExcess)
    causes.push_back(fmt::format("{:.1f} runnable threads on {} cores", r.runnable, r.cores));
  if (r.others_cores >= core::kSharedOthersCores && (r.cores > 0 || !causes.empty()))
    causes.push_back(causes.empty()
                         ? fmt::format("other processes kept {:.1f} of {} cores busy", r.others_cores, r.cores)
                         : fmt::format("other processes kept {:.1f} cores busy", r.others_cores));
  std::string out;
  for (const auto& c : causes) out += (out.empty() ? "CPU shared: " : ", ") + c;
  return out;
}

std::vector<std::string> HealthRules::judge(const std::vector<RankInterval>& ranks) {
  std::vector<std::string> warnings;
  constexpr double kStragglerMinExcessS = 0.005;
  for (const auto& r : ranks) {
    const int rank = r.rank;
    const std::string who = "rank " + std::to_string(rank) + " on " + r.host;
    // The median of the other ranks: with 2 ranks the median of both is their mean, which a rank at
    // 1.8x the other's compute (a core shared with 2 busy loops) is only 1.29x of.
    std::vector<double> others;
    for (const auto& o : ranks)
      if (o.rank != rank) others.push_back(o.compute_s);
    const double typical = median(others);
    const double c = r.compute_s, s = r.step_s, d = r.data_s;
    // Both relative and absolute: a few milliseconds of scheduling noise on a millisecond step is not a
    // straggler. And in two reports in a row: one interval on a shared core (3 ranks on 2 cores named a
    // random rank 1.3-2.6x in one report of six) is not either.
    const bool slow = ranks.size() > 1 && typical > 0 && c > 1.3 * typical && c - typical > kStragglerMinExcessS;
    const bool slow_before = std::exchange(slow_before_[rank], slow);
    if (r.oversubscribed && oversubscribed_.insert(r.host).second)
      warnings.push_back(fmt::format("oversubscribed: {}: more ranks of the job on its machine than free cores{}", who,
                                     r.mpi_waits.empty() ? "" : "; " + r.mpi_waits));
    if (slow && slow_before) {
      const std::string cause = cpu_shared_cause(r);
      warnings.push_back(
          fmt::format("straggler: {} computes {:.0f} ms per step, {:.1f}x the other ranks' median {:.0f} ms "
                      "(every other rank waits for it){}",
                      who, 1e3 * c, c / typical, 1e3 * typical, cause.empty() ? "" : "; " + cause));
    }
    if (s > 0 && d > 0.2 * s)
      warnings.push_back(
          fmt::format("data wait: {} waits {:.0f} ms of its {:.0f} ms step for data ({:.0f} %): the loader "
                      "cannot keep up (storage, decoding, augmentation)",
                      who, 1e3 * d, 1e3 * s, 100 * d / s));
    auto& history = rss_history_[rank];
    history.push_back(r.rss_mb);
    if (history.size() > 6) history.erase(history.begin());
    bool growing = history.size() == 6;
    for (size_t i = 1; growing && i < history.size(); ++i) growing = history[i] > history[i - 1];
    if (growing && history.back() > 1.1 * history.front())
      warnings.push_back(
          fmt::format("memory: {} resident memory grew in each of the last 5 reports, {:.0f} -> {:.0f} MB", who,
                      history.front(), history.back()));
  }
  return warnings;
}

HealthMonitor::HealthMonitor(const comm::Runtime& runtime, comm::Communicator& control, const std::string& run_dir)
    : rt_(runtime), control_(control) {
  if (rt_.rank() == 0 && !run_dir.empty()) {
    std::filesystem::create_directories(run_dir);
    path_ = run_dir + "/health.jsonl";
    file_.open(path_, std::ios::app);
    if (!file_) throw SystemError("cannot open '" + path_ + "' for writing");
  }
  cpu_.open(rt_.machine_pids());
}

HealthMonitor::~HealthMonitor() = default;

void StepInterval::record(const StepSeconds& t) {
  step_ += t.step;
  data_ += t.data;
  comm_ += t.comm;
  compute_.push_back(std::max(0.0, t.step - t.data - t.comm));
  ++steps_;
}

StepSeconds StepInterval::mean() const {
  const double n = double(std::max<int64_t>(steps_, 1));
  return {step_ / n, data_ / n, comm_ / n};
}

double StepInterval::compute() const { return compute_.empty() ? 0.0 : median(compute_); }

void StepInterval::clear() {
  step_ = data_ = comm_ = 0;
  steps_ = 0;
  compute_.clear();
}

void HealthMonitor::record(const StepSeconds& t) {
  interval_.record(t);
  cpu_.sample_runnable();
}

std::vector<std::string> HealthMonitor::report(int64_t step, const std::string& shares) {
  // Across nodes, the links between them (one rank per node): a slow link slows every rank's
  // communication alike, so step times cannot name it; these probes can.
  std::vector<LinkFacts> links;
  if (rt_.node_count() > 1) {
    if (ranks_.empty()) {
      nlohmann::json me{{"rank", rt_.rank()}, {"host", rt_.host()}, {"local_rank", rt_.local_rank()}};
      for (const auto& text : rt_.allgather(me.dump())) {
        const auto j = nlohmann::json::parse(text);
        RankFacts f;
        f.rank = j["rank"], f.host = j["host"], f.local_rank = j["local_rank"];
        ranks_.push_back(f);
      }
    }
    links = measure_links(rt_, ranks_, kLinkProbeBytes, kLinkProbeIters, 0);
  }
  // Latency of a one-value allreduce (the best of 5: the network, not a busy moment).
  double probe = 1e30;
  auto one = at::zeros({1}, at::kFloat);
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    control_.allreduce(one);
    probe = std::min(probe, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const StepSeconds mean = interval_.mean();
  const core::CpuShare cpu = cpu_.close();
  nlohmann::json mine{{"rank", rt_.rank()},
                      {"host", rt_.host()},
                      {"step_s", mean.step},
                      {"data_s", mean.data},
                      {"comm_s", mean.comm},
                      {"compute_s", interval_.compute()},
                      {"rss_mb", resident_mb()},
                      {"probe_us", 1e6 * probe},
                      {"cpu",
                       {{"cores", cpu.cpus},
                        {"busy_cores", cpu.busy_cores},
                        {"others_cores", cpu.others_cores},
                        {"steal_pct", cpu.steal_pct},
                        {"runnable", cpu.runnable}}},
                      {"oversubscribed", rt_.thread_choice().oversubscribed},
                      {"mpi_waits", rt_.mpi_waits()},
                      {"gpu", rt_.device().is_cuda() ? nvml().stats(rt_.device().index()) : nlohmann::json(nullptr)}};
  interval_.clear();
  cpu_.open(rt_.machine_pids());
  const auto all = rt_.gather_to_root(mine.dump());
  if (rt_.rank() != 0) return {};

  std::vector<nlohmann::json> ranks;
  std::vector<RankInterval> intervals;
  for (const auto& text : all) {
    ranks.push_back(nlohmann::json::parse(text));
    const auto& r = ranks.back();
    RankInterval i{r["rank"].get<int>(),      r["host"].get<std::string>(), r["step_s"].get<double>(),
                   r["data_s"].get<double>(), r["compute_s"].get<double>(), r["rss_mb"].get<double>()};
    const auto& c = r["cpu"];
    i.cores = c["cores"], i.steal_pct = c["steal_pct"], i.runnable = c["runnable"], i.others_cores = c["others_cores"];
    i.oversubscribed = r.value("oversubscribed", false), i.mpi_waits = r.value("mpi_waits", std::string());
    intervals.push_back(i);
  }
  std::vector<std::string> warnings = rules_.judge(intervals);
  nlohmann::json link_lines = nlohmann::json::array();
  for (const auto& l : links)
    link_lines.push_back({{"a", l.bandwidth.a},
                          {"b", l.bandwidth.b},
                          {"latency_us", l.latency.one_way_us},
                          {"bandwidth_gbs", l.bandwidth.bandwidth_gbs}});
  // Bandwidth only: a core shared with training (or another job) delays the latency probe by
  // milliseconds (2 ms against 22 us in a test beside a busy loop), which is no slow link. And in two
  // reports in a row: 3 ranks on 2 cores once measured one node's links at 33 MB/s against 0.15 GB/s
  // in a single report, a process waiting for a core, not a link.
  std::set<int> slow_now;
  for (const auto& f : check_links(ranks_, links, true, LinkEvidence::BandwidthOnly))
    if (f.check == "slow rank" && slow_now.insert(f.rank).second && slow_links_.count(f.rank))
      warnings.push_back("network: " + f.text +
                         ": a slow link to that node (its NIC, cable, switch port or VM host), not its compute; "
                         "every rank's communication waits for it");
  slow_links_ = std::move(slow_now);
  if (!shares.empty()) spdlog::info("health at step {}: batch shares {}", step, shares);
  for (const auto& w : warnings) spdlog::warn("health at step {}: {}", step, w);
  if (file_.is_open()) {
    const double now = unix_seconds();
    file_ << nlohmann::json{{"step", step},        {"time", now},          {"ranks", ranks},
                            {"links", link_lines}, {"warnings", warnings}, {"shares", shares}}
                 .dump()
          << "\n";
    file_.flush();
  }
  return warnings;
}

}  // namespace meridian::ops
