#include "meridian/ops/network_check.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "meridian/comm/bench.h"
#include "meridian/comm/communicator.h"
#include "meridian/comm/runtime.h"
#include "meridian/comm/watchdog.h"
#include "meridian/core/error.h"
#include "meridian/ops/checks.h"

namespace meridian::ops {

namespace {

constexpr size_t kMaxPairs = 32;  // all pairs up to this many, else a ring
constexpr size_t kLatencyBytes = 8;
constexpr int kLatencyIters = 50;

// One rank per node (its local rank 0) when the job spans nodes; every rank on a single node, so it still
// has pairs to measure.
std::vector<int> representatives(const std::vector<RankFacts>& facts, int node_count) {
  std::vector<int> reps;
  for (const auto& f : facts)
    if (node_count == 1 || f.local_rank == 0) reps.push_back(f.rank);
  return reps;
}

// Every pair up to kMaxPairs; beyond, a ring (each to the next) and each to the one half-way round.
std::vector<std::pair<int, int>> choose_pairs(const std::vector<int>& reps) {
  std::vector<std::pair<int, int>> pairs;
  const size_t n = reps.size();
  if (n * (n - 1) / 2 <= kMaxPairs) {
    for (size_t i = 0; i < n; ++i)
      for (size_t j = i + 1; j < n; ++j) pairs.push_back({reps[i], reps[j]});
    return pairs;
  }
  std::set<std::pair<int, int>> seen;
  for (size_t i = 0; i < n; ++i)
    for (size_t step : {size_t(1), n / 2}) {
      const int a = reps[i], b = reps[(i + step) % n];
      if (a != b && seen.insert({std::min(a, b), std::max(a, b)}).second)
        pairs.push_back({std::min(a, b), std::max(a, b)});
    }
  return pairs;
}

// What ends the job when a probe outside any communicator does not complete.
comm::Watchdog::Handler abort_on_expiry(const comm::Runtime& rt) {
  return [&rt](const std::string& what, double elapsed) {
    comm::abort_job(fmt::format("{} doctor: {} did not complete within {} s (elapsed {:.1f} s): these ranks cannot "
                                "exchange messages (firewall, interface, /etc/hosts: see docs/troubleshooting.md)",
                                where(), what, rt.comm_timeout_s(), elapsed),
                    kExitFatal);
  };
}

}  // namespace

std::vector<std::pair<int, int>> link_pairs(const std::vector<RankFacts>& facts, int node_count) {
  return choose_pairs(representatives(facts, node_count));
}

std::vector<LinkFacts> measure_links(const comm::Runtime& rt, const std::vector<RankFacts>& facts, uint64_t bytes,
                                     int iters, double delay_us) {
  comm::Watchdog watchdog(rt.comm_timeout_s(), abort_on_expiry(rt));
  std::vector<LinkFacts> links;
  for (const auto& [a, b] : link_pairs(facts, rt.node_count())) {
    const uint64_t id = watchdog.begin(fmt::format("ping-pong between {} and {}", who(facts, {a}), who(facts, {b})));
    LinkFacts link;
    link.latency = comm::ping_pong(rt, a, b, kLatencyBytes, kLatencyIters, delay_us);
    link.bandwidth = comm::ping_pong(rt, a, b, bytes, iters, delay_us);
    links.push_back(link);
    watchdog.end(id);
  }
  return links;
}

AllreduceFacts measure_allreduce(const comm::Runtime& rt, uint64_t bytes, int iters) {
  AllreduceFacts result;
  result.ranks = rt.size();
  if (rt.size() == 1) return result;
  comm::CommBenchOptions bench;
  bench.min_bytes = bench.max_bytes = bytes;
  bench.warmup = 2;
  bench.iters = iters;
  bench.reference = false;
  const comm::Backend backend = comm::default_backend(rt);
  auto communicator = comm::make_communicator(rt, backend);
  const comm::CommBenchRow row = comm::run_comm_bench(rt, *communicator, bench).front();
  result.backend = comm::to_string(backend);
  result.bytes = row.bytes;
  result.busbw_gbs = row.busbw_gbs;
  result.time_us = row.time_us;
  result.wrong = row.wrong;
  return result;
}

std::vector<comm::ClockOffset> measure_clock_offsets(const comm::Runtime& rt) {
  if (rt.size() == 1) return {};
  comm::Watchdog watchdog(rt.comm_timeout_s(), abort_on_expiry(rt));
  const uint64_t id = watchdog.begin("clock offset exchange with rank 0");
  const comm::ClockOffset mine = comm::clock_offset_to_root(rt);
  watchdog.end(id);
  std::vector<comm::ClockOffset> offsets;
  for (const auto& text : rt.gather_to_root(fmt::format("{:.9f} {:.9f}", mine.offset_s, mine.error_s))) {
    comm::ClockOffset o;
    std::sscanf(text.c_str(), "%lf %lf", &o.offset_s, &o.error_s);
    offsets.push_back(o);
  }
  return offsets;
}

}  // namespace meridian::ops
