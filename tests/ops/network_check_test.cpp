// Which pairs of ranks doctor's and the health monitor's link probes measure (ops::link_pairs): no MPI.
#include "meridian/ops/network_check.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

namespace meridian::ops {
namespace {

using Pairs = std::vector<std::pair<int, int>>;

// `nodes` nodes of `per_node` ranks each, numbered node by node.
std::vector<RankFacts> job(int nodes, int per_node) {
  std::vector<RankFacts> facts;
  for (int n = 0; n < nodes; ++n)
    for (int l = 0; l < per_node; ++l) {
      RankFacts f;
      f.rank = int(facts.size());
      f.local_rank = l;
      f.local_size = per_node;
      f.host = "node-" + std::to_string(n);
      facts.push_back(f);
    }
  return facts;
}

TEST(LinkPairs, EveryRankOfASingleNode) {
  EXPECT_EQ(link_pairs(job(1, 4), 1), (Pairs{{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}}));
  EXPECT_TRUE(link_pairs(job(1, 1), 1).empty());
}

TEST(LinkPairs, LocalRankZeroOfEachNode) {
  EXPECT_EQ(link_pairs(job(2, 4), 2), (Pairs{{0, 4}}));
  EXPECT_EQ(link_pairs(job(3, 2), 3), (Pairs{{0, 2}, {0, 4}, {2, 4}}));
  EXPECT_EQ(link_pairs(job(8, 1), 8).size(), 28u);  // 8 nodes: all 28 pairs (at most 32)
}

TEST(LinkPairs, ARingAndHalfWayRoundBeyond32Pairs) {
  // 9 nodes (36 pairs): each to the next and to the one 4 further, 18 distinct pairs.
  const Pairs nine = link_pairs(job(9, 2), 9);
  EXPECT_EQ(nine.size(), 18u);
  EXPECT_EQ(nine.front(), (std::pair<int, int>{0, 2}));  // node 0 to node 1 (ranks 0 and 2)
  EXPECT_EQ(nine[1], (std::pair<int, int>{0, 8}));       // node 0 to node 4
  // 10 nodes: the half-way pairs meet themselves going round, so each is measured once: 10 + 5.
  const Pairs ten = link_pairs(job(10, 1), 10);
  EXPECT_EQ(ten.size(), 15u);
  const std::set<std::pair<int, int>> distinct(ten.begin(), ten.end());
  EXPECT_EQ(distinct.size(), ten.size());
  for (const auto& [a, b] : ten) EXPECT_LT(a, b);
  for (int i = 0; i < 10; ++i) {  // every node in the ring
    const std::pair<int, int> next{std::min(i, (i + 1) % 10), std::max(i, (i + 1) % 10)};
    EXPECT_NE(std::find(ten.begin(), ten.end(), next), ten.end()) << i;
  }
}

}  // namespace
}  // namespace meridian::ops
