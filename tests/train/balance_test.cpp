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

TEST(BalanceShares, WindowsRoundTripThroughTheirTextExactly) {
  const std::vector<std::vector<double>> windows{{0.1, 1.0 / 3}, {2.5e-5, 7.0}};
  EXPECT_EQ(format_windows(windows), "0.10000000000000001,0.33333333333333331;2.5000000000000001e-05,7");
  EXPECT_EQ(parse_windows(format_windows(windows)), windows);
  EXPECT_TRUE(parse_windows("").empty());
  EXPECT_THROW(parse_windows("0.1,x"), std::invalid_argument);
  EXPECT_THROW(parse_windows("0.1,0"), std::invalid_argument);  // not a time per sample
  EXPECT_THROW(parse_windows("0.1,nan"), std::invalid_argument);
  EXPECT_DOUBLE_EQ(parse_number("-1"), -1.0);
  EXPECT_THROW(parse_number("1.5s"), std::invalid_argument);
}

// decide_shares: the median of the last 3 windows, the threshold plus the scatter, the cost.
using Windows = std::vector<std::vector<double>>;

TEST(DecideShares, TheFirstWindowDecidesAloneWhenTheGainPassesTheThreshold) {
  // Rank 1 takes twice as long per sample: 64 samples go 43 : 21; 32 x 2 = 64 s -> 43 s per step.
  const auto d = decide_shares({32, 32}, {{1.0, 2.0}}, 64, 0.05, 1.0, 15);
  EXPECT_TRUE(d.change) << d.why;
  EXPECT_EQ(d.shares, (std::vector<int64_t>{43, 21}));
  EXPECT_DOUBLE_EQ(d.now_s, 64.0);
  EXPECT_DOUBLE_EQ(d.then_s, 43.0);
  EXPECT_DOUBLE_EQ(d.scatter, 0.0);  // one window: no scatter to measure
  // Rank 1 at 1.06: 33 : 31 would gain 2.7 %, within the threshold.
  const auto small = decide_shares({32, 32}, {{1.0, 1.06}}, 64, 0.05, 0.0, 15);
  EXPECT_EQ(small.shares, (std::vector<int64_t>{33, 31}));
  EXPECT_FALSE(small.change);
  EXPECT_NE(small.why.find("within train.balance_threshold"), std::string::npos) << small.why;
}

TEST(DecideShares, OneNoisyWindowMovesNothingARealChangeWinsInItsSecondWindow) {
  const std::vector<int64_t> even{32, 32};
  // Balanced at equal speeds; one window where rank 1 looked 1.6x slower: the median is 1.0.
  const auto noisy = decide_shares(even, Windows{{1.0, 1.0}, {1.0, 1.0}, {1.0, 1.6}}, 64, 0.05, 0.0, 15);
  EXPECT_FALSE(noisy.change) << noisy.why;
  EXPECT_EQ(noisy.shares, even);
  // The same as a lasting change: its second window wins the median (the oldest window drops out).
  const auto real = decide_shares(even, Windows{{1.0, 1.0}, {1.0, 1.6}, {1.0, 1.6}}, 64, 0.05, 0.0, 15);
  EXPECT_TRUE(real.change) << real.why;
  EXPECT_EQ(real.shares, (std::vector<int64_t>{39, 25}));  // 64 x 1.6 / 2.6 = 39.4
  // More than 3 windows given: only the last 3 count.
  const auto four = decide_shares(even, Windows{{1.0, 9.0}, {1.0, 1.0}, {1.0, 1.0}, {1.0, 1.6}}, 64, 0.05, 0.0, 15);
  EXPECT_FALSE(four.change) << four.why;
  // Given back: back at equal speeds for two windows, the shares go back to even.
  const std::vector<int64_t> loaded{39, 25};
  const auto back = decide_shares(loaded, Windows{{1.0, 1.6}, {1.0, 1.0}, {1.0, 1.0}}, 64, 0.05, 0.0, 15);
  EXPECT_TRUE(back.change) << back.why;
  EXPECT_EQ(back.shares, even);
}

TEST(DecideShares, TheEstimatesScatterRaisesTheGainAChangeNeeds) {
  // Rank 1's median is 1.15: even shares (64) predict 36.8 s, 34 : 30 predict 34.5 (6.3 % faster).
  const std::vector<int64_t> even{32, 32};
  const auto steady = decide_shares(even, Windows{{1.0, 1.15}, {1.0, 1.15}, {1.0, 1.15}}, 64, 0.05, 0.0, 15);
  EXPECT_TRUE(steady.change) << steady.why;
  EXPECT_EQ(steady.shares, (std::vector<int64_t>{34, 30}));
  // The same median with rank 0 scattered by 10 % around its own (1.0 +- 0.1): not enough.
  const auto noisy = decide_shares(even, Windows{{0.9, 1.15}, {1.0, 1.15}, {1.1, 1.15}}, 64, 0.05, 0.0, 15);
  EXPECT_NEAR(noisy.scatter, 0.1, 1e-12);
  EXPECT_FALSE(noisy.change) << noisy.why;
}

TEST(DecideShares, AChangeMustGainMoreThanItCostsOverTheStepsAhead) {
  // 64 s -> 43 s per step: 21 s gained per step.
  const std::vector<int64_t> even{32, 32};
  EXPECT_TRUE(decide_shares(even, {{1.0, 2.0}}, 64, 0.05, 100.0, 5).change);  // 105 s > 100 s
  const auto costly = decide_shares(even, {{1.0, 2.0}}, 64, 0.05, 110.0, 5);  // 105 s < 110 s
  EXPECT_FALSE(costly.change);
  EXPECT_NE(costly.why.find("not more than a change costs"), std::string::npos) << costly.why;
  EXPECT_FALSE(decide_shares(even, {{1.0, 2.0}}, 64, 0.05, 0.0, 0).change);  // the run's last step
  // Not measured yet (< 0): one step at the current shares, 64 s: 3 steps ahead pay, 3 x 21 = 63 do not.
  EXPECT_TRUE(decide_shares(even, {{1.0, 2.0}}, 64, 0.05, -1, 4).change);
  EXPECT_FALSE(decide_shares(even, {{1.0, 2.0}}, 64, 0.05, -1, 3).change);
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
