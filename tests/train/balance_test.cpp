// train::balance_shares and friends: the arithmetic every rank does alike to agree on shares.
#include "meridian/train/balance.h"

#include <gtest/gtest.h>

#include <numeric>
#include <regex>
#include <stdexcept>

#include "meridian/core/config.h"
#include "meridian/core/error.h"
#include "meridian/train/settings.h"

namespace meridian::train {
namespace {

int64_t sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t(0)); }

TEST(BalanceShares, ProportionalToSpeed) {
  // Speeds 2 : 1 (seconds per sample 1 : 2): 128 samples go 85.33 : 42.67, rounded to 85 : 43.
  EXPECT_EQ(balance_shares({1.0, 2.0}, 128, 256), (std::vector<int64_t>{85, 43}));
  // Equal speeds: even.
  EXPECT_EQ(balance_shares({0.5, 0.5, 0.5}, 12, 8), (std::vector<int64_t>{4, 4, 4}));
  // 1 : 1 : 3 seconds: speeds 3 : 3 : 1 of 14 samples -> 6, 6, 2.
  EXPECT_EQ(balance_shares({1.0, 1.0, 3.0}, 14, 14), (std::vector<int64_t>{6, 6, 2}));
}

TEST(BalanceShares, BoundsAreKeptAndTheRestSharedAgain) {
  // Rank 1 is 100x slower: its proportional share (0.08) is raised to 1, the rest goes to rank 0.
  EXPECT_EQ(balance_shares({0.01, 1.0}, 8, 7), (std::vector<int64_t>{7, 1}));
  // At most 5 per rank: rank 0 (fastest) is capped, ranks 1 and 2 share the rest 2 : 1.
  const auto s = balance_shares({0.1, 1.0, 2.0}, 11, 5);
  EXPECT_EQ(s, (std::vector<int64_t>{5, 4, 2}));
  // Whatever the speeds: within the bounds and summing to the total.
  for (double slow : {1.0, 1.7, 3.3, 10.0, 1e3})
    for (int64_t total : {3, 10, 97}) {
      const auto v = balance_shares({1.0, slow, 1.3}, total, total);
      EXPECT_EQ(sum(v), total);
      for (int64_t x : v) EXPECT_GE(x, 1);
    }
  EXPECT_THROW(balance_shares({1.0, 1.0}, 9, 4), std::invalid_argument);  // 2 x 4 < 9
  EXPECT_THROW(balance_shares({1.0, 1.0}, 1, 4), std::invalid_argument);  // a sample per rank at least
}

TEST(BalanceShares, PredictedStepIsTheSlowestRank) {
  EXPECT_DOUBLE_EQ(predicted_step({4, 4}, {1.0, 2.0}), 8.0);
  EXPECT_DOUBLE_EQ(predicted_step({5, 3}, {1.0, 2.0}), 6.0);
}

TEST(BalanceShares, ParsedFromText) {
  EXPECT_EQ(parse_shares("6,2"), (std::vector<int64_t>{6, 2}));
  EXPECT_EQ(parse_shares("7, 3 ,2"), (std::vector<int64_t>{7, 3, 2}));
  EXPECT_THROW(parse_shares("4,x"), std::invalid_argument);
  EXPECT_THROW(parse_shares("4,2.5"), std::invalid_argument);
}

// The balance keys' bad values, as `meridian train` meets them with 2 ranks of train.batch 4: the
// schema's check of the train: keys, then the Balancer (tests/train/balance_mpi_test.sh shows one end
// to end: exit 2 on every rank).
TEST(Balancer, BadSettingsNameTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"balance_max: 3", "train.balance_max.*below train.batch 4"},
      {"balance_every: 0", "train.balance_every"},
      {"balance_threshold: 1", "train.balance_threshold"},
      {"balance_threshold: -0.1", "train.balance_threshold"},
      {"balance: sometimes", "train.balance.*off or auto"},
      {"balance_shares: '5,2'", "train.balance_shares.*sum to 7, not the global micro-batch 8"},
      {"balance_shares: '4,2,2'", "train.balance_shares.*3 shares for 2 ranks"},
      {"balance_shares: '0,8'", "train.balance_shares.*a share of 0, outside \\[1, 7\\]"},
      {"balance_shares: '4,x'", "train.balance_shares.*'x' is not an integer"},
  };
  ConfigSchema schema;
  TrainerSettings::declare(schema);
  for (const auto& [setting, pattern] : cases) {
    std::string message;
    try {
      Config config = Config::parse("train: {" + setting + "}", "t.yaml");
      schema.check(config);
      Balancer(0, 2, 4, TrainerSettings::from_config(config), config);
    } catch (const UserError& e) {
      message = e.what();
    }
    EXPECT_TRUE(std::regex_search(message, std::regex(pattern))) << setting << ": '" << message << "'";
  }
}

}  // namespace
}  // namespace meridian::train
