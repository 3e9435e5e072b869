// The doctor's checks of the measured network: point-to-point links, the allreduce, clock offsets.
#include <arpa/inet.h>
#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <sstream>

#include "checks_common.h"
#include "meridian/core/stats.h"
#include "meridian/ops/checks.h"

namespace meridian::ops {

using namespace detail;

// ---- Network.

Findings check_links(const Facts& facts, const std::vector<LinkFacts>& links, bool between_nodes,
                     LinkEvidence evidence) {
  if (links.empty()) return {{Status::Ok, "p2p", "one rank: no pair to measure", ""}};
  const auto name = [&](int r) { return fmt::format("{} r{}", facts[r].host, r); };
  std::vector<double> bws, lats;
  for (const auto& l : links) bws.push_back(l.bandwidth.bandwidth_gbs), lats.push_back(l.latency.one_way_us);
  const double med = median(bws), med_lat = median(lats);
  // Between nodes a pair is a network path; within one node it is shared memory, slow only when a CPU is.
  const std::string slow_hint =
      between_nodes ? "a slow link slows every step of the job: check the NIC's speed and errors (ethtool, ip -s "
                      "link), MTU, the switch port, a VM's virtual NIC type (virtio/vmxnet3) and other traffic; rerun "
                      "to rule out noise"
                    : "ranks of one node talk through shared memory: a slow pair means a busy or throttled CPU "
                      "(another process, more ranks than cores, CPU quota); rerun to rule out noise";
  const std::string slow_rank_hint =
      between_nodes ? "every link of this node is slow: its NIC or driver, or a busy host (another job, a VM host "
                      "that is oversubscribed); fix the node or leave it out of the hostfile before training"
                    : "every pair with this rank is slow: its core is busy with another process or throttled "
                      "(top, mpirun --report-bindings); every step waits for the slowest rank";
  Findings lines;
  for (const auto& l : links) {
    const std::string text = fmt::format("{} <-> {}: latency {:.1f} us, bandwidth {} ({} MiB messages)",
                                         name(l.bandwidth.a), name(l.bandwidth.b), l.latency.one_way_us,
                                         rate(l.bandwidth.bandwidth_gbs), l.bandwidth.bytes >> 20);
    if (links.size() > 1 && slower(l.bandwidth.bandwidth_gbs, l.latency.one_way_us, med, med_lat, evidence))
      lines.push_back({Status::Warn, "p2p",
                       text + fmt::format(": slow link (median of all pairs: {:.1f} us, {})", med_lat, rate(med)),
                       slow_hint});
    else
      lines.push_back({Status::Ok, "p2p", text, ""});
  }
  Findings findings;
  for (const auto& l : lines)
    if (l.status != Status::Ok || lines.size() <= 2 * kMaxNodeLines) findings.push_back(l);
  if (findings.size() < lines.size())
    findings.push_back(
        {Status::Ok, "p2p",
         fmt::format("{} more pair(s) OK; median {:.2f} GB/s, min {:.2f}, max {:.2f}", lines.size() - findings.size(),
                     med, *std::min_element(bws.begin(), bws.end()), *std::max_element(bws.begin(), bws.end())),
         ""});

  // A slow rank or node shows as all its links slow: compare each endpoint's links with the links between the others.
  std::set<int> endpoints;
  for (const auto& l : links) endpoints.insert(l.bandwidth.a), endpoints.insert(l.bandwidth.b);
  for (int e : endpoints) {
    std::vector<double> mine, others, mine_lat, others_lat;
    for (const auto& l : links) {
      const bool in = l.bandwidth.a == e || l.bandwidth.b == e;
      (in ? mine : others).push_back(l.bandwidth.bandwidth_gbs);
      (in ? mine_lat : others_lat).push_back(l.latency.one_way_us);
    }
    if (mine.empty() || others.empty()) continue;
    // Its best link against the others' median: every link of the node must be slow (with 3 nodes a
    // median of its 2 links would mix the slow one of a neighbour into it).
    const double m = *std::max_element(mine.begin(), mine.end()), o = median(others),
                 ml = *std::min_element(mine_lat.begin(), mine_lat.end()), ol = median(others_lat);
    if (slower(m, ml, o, ol, evidence))
      findings.push_back({Status::Warn, "slow rank",
                          fmt::format("{}: its {} link(s) reach {:.1f} us, {} at best; the links between the "
                                      "others {:.1f} us, {}",
                                      who(facts, {e}), mine.size(), ml, rate(m), ol, rate(o)),
                          slow_rank_hint, e});
  }
  return findings;
}

Findings check_allreduce(const AllreduceFacts& a) {
  if (a.ranks == 1) return {{Status::Ok, "allreduce", "one rank: nothing to reduce, no clock to compare", ""}};
  const std::string text = fmt::format("{} ranks, {}, {} MiB float32: busbw {:.2f} GB/s, {:.0f} us", a.ranks, a.backend,
                                       a.bytes >> 20, a.busbw_gbs, a.time_us);
  if (a.wrong != 0)
    return {{Status::Fail, "allreduce", text + fmt::format(": {} wrong elements", a.wrong),
             "the collective returned wrong sums: a broken transport; run meridian bench comm, and with NCCL set "
             "NCCL_DEBUG=WARN"}};
  return {{Status::Ok, "allreduce", text, ""}};
}

Findings check_clocks(const Facts& facts, const std::vector<comm::ClockOffset>& offsets) {
  if (offsets.size() < 2) return {};
  std::vector<int> skewed;
  int worst = 0;
  double worst_abs = 0, worst_err = 0;
  for (int r = 0; r < static_cast<int>(offsets.size()); ++r) {
    const double off = std::abs(offsets[r].offset_s);
    if (off > kClockWarnS) skewed.push_back(r);
    if (off >= worst_abs) worst = r, worst_abs = off, worst_err = offsets[r].error_s;
  }
  const std::string text = fmt::format("largest offset to rank 0: {:.3f} ms ({}, +-{:.3f} ms)", worst_abs * 1e3,
                                       who(facts, {worst}), worst_err * 1e3);
  if (skewed.empty()) return {{Status::Ok, "clock", text, ""}};
  return {{Status::Warn, "clock",
           fmt::format("{}; {} off by more than {:.0f} ms", text, who(facts, skewed), kClockWarnS * 1e3),
           "clocks differ between nodes (timestamps in logs, traces and metrics will not line up): run NTP "
           "(chrony: systemctl enable --now chrony; chronyc tracking) on every node"}};
}

}  // namespace meridian::ops
