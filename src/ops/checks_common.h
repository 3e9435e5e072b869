// Private to ops: what the doctor's checks share (checks.cpp: each node; checks_ranks.cpp:
// consistency across ranks; checks_network.cpp: the measured network): thresholds, the wording of
// rank lists, grouping by node and by value. Not collective; no MPI.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "meridian/ops/checks.h"

namespace meridian::ops::detail {

inline constexpr double kGiB = 1024.0 * 1024 * 1024;
inline constexpr double kShmWarnBytes = 1 * kGiB;   // NCCL and Open MPI put intra-node buffers in /dev/shm
inline constexpr double kDiskFailBytes = 1 * kGiB;  // not even one checkpoint of a small model
inline constexpr double kDiskWarnBytes = 10 * kGiB;
inline constexpr double kMemWarnPerRank = 2 * kGiB;  // host memory available per rank on a node
inline constexpr double kSlowFactor = 3;             // a link (or rank) below 1/3 of the median is slow
inline constexpr double kLatencyFloorUs = 50;        // ...and latency above 3x the median only when also 50 us above it
inline constexpr double kClockWarnS = 0.1;
inline constexpr size_t kMaxNodeLines = 8;  // per-node checks: beyond this, OK nodes are summarised

using Facts = std::vector<RankFacts>;

// "all 4 ranks", "the only rank"
std::string all_ranks(size_t n);
std::string gib(double bytes);
// A link's bandwidth: GB/s, or MB/s below 0.1 GB/s (a throttled link would read "0.00 GB/s").
std::string rate(double gbs);
// "0-2,5"
std::string ranges(std::vector<int> ranks);
// "rank 3", "ranks 0-2,5"
std::string ranks_text(const std::vector<int>& ranks);
// "a, b, c"
std::string joined(const std::vector<std::string>& items);
// Ranks grouped by value, in order of first appearance (so rank 0's group comes first).
std::vector<std::pair<std::string, std::vector<int>>> group_by(const std::vector<std::string>& values);

struct Node {
  std::string host;
  std::vector<int> ranks;
};
std::vector<Node> nodes_of(const Facts& facts);

// `judge` gives each node's finding (for check `check`); beyond kMaxNodeLines nodes the OK ones become
// one summary line.
Findings per_node(const Facts& facts, const std::string& check,
                  const std::function<Finding(const Node&, const RankFacts& first)>& judge);
// "2 each" when all ranks have the same value, else "2,2,1,2".
std::string per_rank_list(const Facts& facts, const std::vector<int>& ranks, int RankFacts::*field);
// Same value on every rank (one OK line), or `on_mismatch` naming every group that differs from rank 0's.
Finding compare(const Facts& facts, const std::string& check, Status on_mismatch,
                const std::function<std::string(const RankFacts&)>& value, const std::string& hint);
// Slow compared with a reference: bandwidth below 1/kSlowFactor of it, or latency above kSlowFactor times
// it (and kLatencyFloorUs more, so that microsecond jitter between ranks of one node is no finding).
bool slower(double bw, double lat_us, double ref_bw, double ref_lat_us, LinkEvidence evidence);

}  // namespace meridian::ops::detail
