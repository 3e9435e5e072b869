// `meridian doctor`: preflight check of the machines a job runs on, under the same launcher as
// training. Every rank gathers facts about itself (ops/facts.h); rank 0 judges them (ops/checks.h);
// then the ranks measure the network together (ops/network_check.h: point-to-point between nodes, an
// allreduce over the job, clock offsets to rank 0). Rank 0 prints one line per finding, OK / WARN /
// FAIL, with a hint under each WARN and FAIL; every rank exits 1 when a check FAILed, else 0.
// docs/troubleshooting.md explains each finding.
#include <spdlog/fmt/fmt.h>

#include <cstdio>
#include <cstdlib>
#include <optional>

#include "commands.h"
#include "meridian/build_config.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/core/units.h"
#include "meridian/ops/checks.h"
#include "meridian/ops/facts.h"
#include "meridian/ops/network_check.h"
#ifdef MERIDIAN_WITH_DATA
#include "meridian/data/format.h"
#endif

namespace meridian::cli {

namespace {

// Rank 0's report: prints each finding as it comes, so a later hang leaves what came before visible.
class Report {
 public:
  void add(const ops::Findings& findings) {
    for (const auto& f : findings) {
      std::printf("%-4s  %-12s %s\n", ops::label(f.status), f.check.c_str(), f.text.c_str());
      if (f.status != ops::Status::Ok && !f.hint.empty()) std::printf("%-4s  %-12s hint: %s\n", "", "", f.hint.c_str());
      ++counts_[static_cast<int>(f.status)];
    }
    std::fflush(stdout);
  }
  void section(const std::string& title) {
    std::printf("-- %s\n", title.c_str());
    std::fflush(stdout);
  }
  int count(ops::Status s) const { return counts_[static_cast<int>(s)]; }

 private:
  int counts_[3] = {0, 0, 0};
};

struct DoctorOptions {
  std::string run_dir, data;
  uint64_t p2p_bytes = 4u << 20, allreduce_bytes = 32u << 20;
  int iters = 10;
  int delay_rank = -1;  // --inject-delay: test hook
  double delay_us = 0;
};

void parse_inject_delay(const std::string& text, DoctorOptions& o) {
  if (text.empty()) return;
  const auto colon = text.find(':');
  char* end = nullptr;
  if (colon != std::string::npos) {
    const long rank = std::strtol(text.c_str(), &end, 10);
    const double us = std::strtod(text.c_str() + colon + 1, nullptr);
    if (end == text.c_str() + colon && rank >= 0 && us > 0) {
      o.delay_rank = static_cast<int>(rank);
      o.delay_us = us;
      return;
    }
  }
  throw UserError("--inject-delay: expected RANK:MICROSECONDS (e.g. 1:2000), got '" + text + "'");
}

// What identifies a dataset: validate_dataset's summary plus a hash of its first MiB. Here, not in ops:
// the data area is above ops.
std::optional<ops::DataFacts> data_facts(const std::string& path) {
  if (path.empty()) return std::nullopt;
  ops::DataFacts d;
  d.path = path;
#ifdef MERIDIAN_WITH_DATA
  try {
    const data::DatasetInfo info = data::validate_dataset(path);
    d.kind = info.kind;
    d.count = info.count;
    d.format_version = info.format_version;
    d.split = info.split;
    d.created_by = info.created_by;
    d.bytes = info.file_bytes;
    d.head = ops::file_hash(path, ops::kDataHeadBytes);
  } catch (const std::exception& e) {
    d.error = e.what();
  }
#endif
  return d;
}

}  // namespace

Command doctor_command() {
  Command c;
  c.name = "doctor";
  c.reports_gpu_build = true;
  c.summary = "Preflight check of every rank's machine, versions, data and network (run under the training launcher)";
  // clang-format off
  c.add_options = [](cxxopts::Options& o) {
    o.custom_help("[options]   (one line per check: OK, WARN or FAIL with a hint; exit 1 on any FAIL; the free space "
                  "checked is that of --run-dir, default the current directory: pass the run directory of training)");
    o.add_options()
        ("data", "Dataset every rank must see identically (fingerprint: format summary + hash of the first MiB)", cxxopts::value<std::string>()->default_value(""))
        ("p2p-bytes", "Message size of the point-to-point bandwidth probe (suffix K, M, G)", cxxopts::value<std::string>()->default_value("4M"))
        ("allreduce-bytes", "Message size of the allreduce probe (suffix K, M, G)", cxxopts::value<std::string>()->default_value("32M"))
        ("iters", "Timed round trips per pair and timed allreduces", cxxopts::value<int>()->default_value("10"));
    // Not in --help: a test hook that makes one rank's side of every ping-pong slower.
    o.add_options("testing")
        ("inject-delay", "RANK:US: that rank sleeps US microseconds before each ping-pong message it sends (on several nodes, only local rank 0s are measured)", cxxopts::value<std::string>()->default_value(""));
  };
  // clang-format on
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    DoctorOptions o;
    o.run_dir = p["run-dir"].as<std::string>();
    if (o.run_dir.empty()) o.run_dir = ".";
    o.data = p["data"].as<std::string>();
    o.p2p_bytes = parse_bytes(p["p2p-bytes"].as<std::string>(), "--p2p-bytes");
    o.allreduce_bytes = parse_bytes(p["allreduce-bytes"].as<std::string>(), "--allreduce-bytes");
    o.iters = p["iters"].as<int>();
    parse_inject_delay(p["inject-delay"].as<std::string>(), o);
    if (o.iters < 1) throw UserError("--iters: must be >= 1");
    if (o.p2p_bytes > (1ull << 30)) throw UserError("--p2p-bytes: at most 1G");
    if (o.delay_rank >= rt.size())
      throw UserError(fmt::format("--inject-delay: rank {} does not exist ({} ranks)", o.delay_rank, rt.size()));
#ifndef MERIDIAN_WITH_DATA
    if (!o.data.empty()) throw UserError("--data: this build has no data area (-DMERIDIAN_WITH_DATA=OFF)");
#endif

    const std::vector<ops::RankFacts> facts = ops::gather_facts(rt, o.run_dir, data_facts(o.data));
    const int nodes = rt.node_count();
    std::optional<Report> report;  // rank 0 judges and prints
    if (rt.rank() == 0) {
      report.emplace();
      std::printf("meridian doctor: %d rank(s) on %d node(s), %s\n", rt.size(), nodes, facts[0].versions.build.c_str());
      report->section("nodes");
      for (const auto& check : {ops::check_cores, ops::check_cpu, ops::check_memory, ops::check_disk, ops::check_shm,
                                ops::check_gpus, ops::check_gpu_build})
        report->add(check(facts));
      report->section("consistency across ranks");
      report->add(ops::check_versions(facts));
      report->add(ops::check_hostnames(facts, nodes));
      report->add(ops::check_shared_dir(facts, nodes));
      report->add(ops::check_environment(facts));
      report->add(ops::check_interfaces(facts, nodes));
      if (!o.data.empty()) report->add(ops::check_data(facts));
      report->section(fmt::format("network ({})",
                                  nodes > 1 ? "between nodes: local rank 0 of each" : "one node: between its ranks"));
    }
    const double delay_us = rt.rank() == o.delay_rank ? o.delay_us : 0;
    const auto links = ops::measure_links(rt, facts, o.p2p_bytes, o.iters, delay_us);
    if (report) report->add(ops::check_links(facts, links, nodes > 1));
    const ops::AllreduceFacts allreduce = ops::measure_allreduce(rt, o.allreduce_bytes, o.iters);
    if (report) report->add(ops::check_allreduce(allreduce));
    const auto offsets = ops::measure_clock_offsets(rt);
    if (report) report->add(ops::check_clocks(facts, offsets));

    int rc = kExitOk;
    if (report) {
      rc = report->count(ops::Status::Fail) > 0 ? kExitCheckFailed : kExitOk;
      std::printf("doctor: %d OK, %d WARN, %d FAIL\n", report->count(ops::Status::Ok), report->count(ops::Status::Warn),
                  report->count(ops::Status::Fail));
      std::fflush(stdout);
    }
    rt.broadcast_bytes(&rc, sizeof(rc), 0);
    return rc;
  };
  return c;
}

}  // namespace meridian::cli
