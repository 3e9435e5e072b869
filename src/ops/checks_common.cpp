// What the doctor's checks share (checks_common.h).
#include "checks_common.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>

namespace meridian::ops::detail {

// "all 4 ranks", "the only rank"
std::string all_ranks(size_t n) { return n == 1 ? "the only rank" : fmt::format("all {} ranks", n); }

std::string gib(double bytes) { return fmt::format("{:.1f} GiB", bytes / kGiB); }
// A link's bandwidth: GB/s, or MB/s below 0.1 GB/s (a throttled link would read "0.00 GB/s").
std::string rate(double gbs) {
  return gbs >= 0.1 ? fmt::format("{:.2f} GB/s", gbs) : fmt::format("{:.1f} MB/s", gbs * 1e3);
}

// "0-2,5"
std::string ranges(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::string s;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i > 0) s += ",";
    s += j > i ? fmt::format("{}-{}", ranks[i], ranks[j]) : std::to_string(ranks[i]);
    i = j + 1;
  }
  return s;
}

// "rank 3", "ranks 0-2,5"
std::string ranks_text(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + ranges(ranks);
}

// "a, b, c"
std::string joined(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& item : items) s += (s.empty() ? "" : ", ") + item;
  return s;
}

// Ranks grouped by value, in order of first appearance (so rank 0's group comes first).
std::vector<std::pair<std::string, std::vector<int>>> group_by(const std::vector<std::string>& values) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (int r = 0; r < static_cast<int>(values.size()); ++r) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == values[r]; });
    if (it == groups.end())
      groups.push_back({values[r], {r}});
    else
      it->second.push_back(r);
  }
  return groups;
}

std::vector<Node> nodes_of(const Facts& facts) {
  std::vector<Node> nodes;
  for (const auto& f : facts) {
    auto it = std::find_if(nodes.begin(), nodes.end(), [&](const Node& n) { return n.host == f.host; });
    if (it == nodes.end())
      nodes.push_back({f.host, {f.rank}});
    else
      it->ranks.push_back(f.rank);
  }
  return nodes;
}

// `judge` gives each node's finding (for check `check`); beyond kMaxNodeLines nodes the OK ones become
// one summary line.
Findings per_node(const Facts& facts, const std::string& check,
                  const std::function<Finding(const Node&, const RankFacts& first)>& judge) {
  Findings findings;
  size_t ok = 0;
  for (const auto& node : nodes_of(facts)) {
    findings.push_back(judge(node, facts[node.ranks.front()]));
    findings.back().check = check;
    ok += findings.back().status == Status::Ok;
  }
  if (findings.size() <= kMaxNodeLines || ok == 0) return findings;
  findings.erase(
      std::remove_if(findings.begin(), findings.end(), [](const Finding& f) { return f.status == Status::Ok; }),
      findings.end());
  findings.push_back({Status::Ok, check, fmt::format("{} more node(s) OK", ok), ""});
  return findings;
}

// "2 each" when all ranks have the same value, else "2,2,1,2".
std::string per_rank_list(const Facts& facts, const std::vector<int>& ranks, int RankFacts::*field) {
  std::vector<std::string> v;
  for (int r : ranks) v.push_back(std::to_string(facts[r].*field));
  if (std::all_of(v.begin(), v.end(), [&](const std::string& x) { return x == v[0]; })) return v[0] + " each";
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + v[i];
  return s;
}

// Same value on every rank (one OK line), or `on_mismatch` naming every group that differs from rank 0's.
Finding compare(const Facts& facts, const std::string& check, Status on_mismatch,
                const std::function<std::string(const RankFacts&)>& value, const std::string& hint) {
  std::vector<std::string> values;
  for (const auto& f : facts) values.push_back(value(f));
  const auto groups = group_by(values);
  if (groups.size() == 1) return {Status::Ok, check, groups[0].first + " on " + all_ranks(facts.size()), ""};
  std::string text = "differs: ";
  for (size_t i = 0; i < groups.size(); ++i)
    text += fmt::format("{}{} has {}", i ? "; " : "", who(facts, groups[i].second), groups[i].first);
  return {on_mismatch, check, text, hint};
}

// Slow compared with a reference: bandwidth below 1/kSlowFactor of it, or latency above kSlowFactor times
// it (and kLatencyFloorUs more, so that microsecond jitter between ranks of one node is no finding).
bool slower(double bw, double lat_us, double ref_bw, double ref_lat_us, LinkEvidence evidence) {
  if (bw * kSlowFactor < ref_bw) return true;
  return evidence == LinkEvidence::LatencyOrBandwidth &&
         lat_us > std::max(kSlowFactor * ref_lat_us, ref_lat_us + kLatencyFloorUs);
}

}  // namespace meridian::ops::detail
