// The health monitor's interval summary (ops::StepInterval) and rules (ops::HealthRules) on made-up
// step times and report intervals: no MPI, no timing.
#include "meridian/ops/health.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace meridian::ops {
namespace {

// `n` ranks on hosts node-0, node-1, ..., each with a 100 ms step, no data wait, 100 ms compute and
// 1000 MB resident.
std::vector<RankInterval> steady(int n) {
  std::vector<RankInterval> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back({r, "node-" + std::to_string(r), 0.100, 0.0, 0.100, 1000.0});
  return ranks;
}

std::vector<RankInterval> with_compute(std::vector<RankInterval> ranks, int rank, double compute_s) {
  ranks[size_t(rank)].compute_s = compute_s;
  return ranks;
}

TEST(StepInterval, MeansAndTheMedianStepsCompute) {
  StepInterval interval;
  EXPECT_EQ(interval.mean().step, 0);  // nothing recorded
  EXPECT_EQ(interval.compute(), 0);
  // Steps of 100 ms (20 data, 30 communication: 50 compute), one hiccup of 400 ms, and one whose waits
  // exceed the step as timed (compute clamped at 0).
  for (int i = 0; i < 3; ++i) interval.record({0.100, 0.020, 0.030});
  interval.record({0.400, 0.020, 0.030});
  interval.record({0.100, 0.080, 0.040});
  const StepSeconds mean = interval.mean();
  EXPECT_DOUBLE_EQ(mean.step, 0.8 / 5);
  EXPECT_DOUBLE_EQ(mean.data, 0.16 / 5);
  EXPECT_DOUBLE_EQ(mean.comm, 0.16 / 5);
  EXPECT_DOUBLE_EQ(interval.compute(), 0.050);  // of {0.05, 0.05, 0.05, 0.35, 0}: not moved by the hiccup
  interval.clear();
  EXPECT_EQ(interval.mean().step, 0);
  EXPECT_EQ(interval.compute(), 0);
  interval.record({0.010, 0.0, 0.0});
  interval.record({0.030, 0.0, 0.0});
  EXPECT_DOUBLE_EQ(interval.compute(), 0.020);  // an even count: the mean of the middle two
}

TEST(HealthRules, SteadyRanksGiveNoWarnings) {
  HealthRules rules;
  for (int report = 0; report < 10; ++report) EXPECT_TRUE(rules.judge(steady(4)).empty()) << report;
}

// A node whose machine holds more of the job's ranks than free cores is named once, with what
// meridian did about it (comm::Runtime::mpi_waits).
TEST(HealthRules, AnOversubscribedNodeIsNamedOnceWithWhatWasDone) {
  HealthRules rules;
  auto ranks = steady(3);
  for (auto& r : ranks) r.oversubscribed = true, r.mpi_waits = "MPI waits yield the core (...)";
  ranks[2].oversubscribed = false, ranks[2].mpi_waits.clear();
  const auto first = rules.judge(ranks);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0],
            "oversubscribed: rank 0 on node-0: more ranks of the job on its machine than free cores; MPI waits yield "
            "the core (...)");
  EXPECT_EQ(first[1].rfind("oversubscribed: rank 1 on node-1", 0), 0u) << first[1];
  EXPECT_TRUE(rules.judge(ranks).empty());  // said once per node
}

TEST(HealthRules, StragglerNamedWhenSlowInTwoReportsInARow) {
  HealthRules rules;
  const auto slow = with_compute(steady(3), 2, 0.200);  // 2x the median rank's 100 ms
  EXPECT_TRUE(rules.judge(slow).empty());               // one report is not enough
  const auto warnings = rules.judge(slow);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(
      warnings[0],
      "straggler: rank 2 on node-2 computes 200 ms per step, 2.0x the other ranks' median 100 ms (every other rank "
      "waits for it)");
  EXPECT_EQ(rules.judge(slow).size(), 1u);      // still slow: still named
  EXPECT_TRUE(rules.judge(steady(3)).empty());  // recovered
  EXPECT_TRUE(rules.judge(slow).empty());       // slow again: one report again
  EXPECT_TRUE(rules.judge(steady(3)).empty());  // a hiccup every other report is never named
  EXPECT_TRUE(rules.judge(slow).empty());
}

TEST(HealthRules, TwoRanksAStragglerAgainstTheOther) {
  // 1.8x the other rank (a core shared with two busy loops): only 1.29x the median of both (their mean).
  HealthRules rules;
  const auto slow = with_compute(steady(2), 1, 0.180);
  EXPECT_TRUE(rules.judge(slow).empty());
  const auto warnings = rules.judge(slow);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0].rfind("straggler: rank 1 on node-1 computes 180 ms per step, 1.8x the other ranks' median "
                              "100 ms",
                              0),
            0u)
      << warnings[0];
}

TEST(HealthRules, AStragglersSharedCpuIsNamedAsTheCause) {
  RankInterval r{1, "node-1", 0.2, 0, 0.2, 1000};
  r.cores = 2;
  EXPECT_EQ(cpu_shared_cause(r), "");  // nothing measured: no cause
  r.runnable = 2.4, r.others_cores = 0.4;
  EXPECT_EQ(cpu_shared_cause(r), "");  // 2 cores, 2 busy ranks and a little noise
  r.runnable = 4.0, r.others_cores = 1.0;
  EXPECT_EQ(cpu_shared_cause(r), "CPU shared: 4.0 runnable threads on 2 cores, other processes kept 1.0 cores busy");
  r.runnable = 2.0;
  EXPECT_EQ(cpu_shared_cause(r), "CPU shared: other processes kept 1.0 of 2 cores busy");
  r.steal_pct = 12.4, r.others_cores = 0;
  EXPECT_EQ(cpu_shared_cause(r), "CPU shared: 12 % steal (the hypervisor ran other VMs on this VM's cores)");
  r.runnable = 4.0, r.others_cores = 0.8;  // steal and another tenant at once: both named
  EXPECT_EQ(
      cpu_shared_cause(r),
      "CPU shared: 12 % steal (the hypervisor ran other VMs on this VM's cores), 4.0 runnable threads on 2 cores, "
      "other processes kept 0.8 cores busy");

  HealthRules rules;
  auto ranks = with_compute(steady(3), 1, 0.250);
  ranks[1].cores = 2, ranks[1].steal_pct = 30;
  ranks[0].cores = 2, ranks[0].steal_pct = 30;  // also stolen from, but not slow: not named
  rules.judge(ranks);
  const auto warnings = rules.judge(ranks);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0],
            "straggler: rank 1 on node-1 computes 250 ms per step, 2.5x the other ranks' median 100 ms (every other "
            "rank waits for it); CPU shared: 30 % steal (the hypervisor ran other VMs on this VM's cores)");
}

TEST(HealthRules, StragglerNeedsBothRelativeAndAbsoluteExcess) {
  {  // 1.2x the median: under 1.3x
    HealthRules rules;
    const auto ranks = with_compute(steady(3), 0, 0.120);
    for (int report = 0; report < 3; ++report) EXPECT_TRUE(rules.judge(ranks).empty());
  }
  {  // 3x a 1 ms median but only 2 ms above it: scheduling noise, not a straggler
    HealthRules rules;
    auto ranks = steady(3);
    for (auto& r : ranks) r.compute_s = 0.001;
    ranks[1].compute_s = 0.003;
    for (int report = 0; report < 3; ++report) EXPECT_TRUE(rules.judge(ranks).empty());
  }
  {  // one rank: no median to compare against
    HealthRules rules;
    for (int report = 0; report < 3; ++report) EXPECT_TRUE(rules.judge({{0, "solo", 0.1, 0.0, 0.5, 1.0}}).empty());
  }
  {  // every rank idle (median 0): nothing to compare against either
    HealthRules rules;
    auto ranks = steady(3);
    for (auto& r : ranks) r.compute_s = 0;
    ranks[2].compute_s = 0.050;
    for (int report = 0; report < 3; ++report) EXPECT_TRUE(rules.judge(ranks).empty());
  }
}

TEST(HealthRules, DataWaitOverAFifthOfTheStep) {
  HealthRules rules;
  auto ranks = steady(2);
  ranks[1].data_s = 0.019;  // 19 %: keeps up
  EXPECT_TRUE(rules.judge(ranks).empty());
  ranks[1].data_s = 0.021;
  const auto warnings = rules.judge(ranks);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0],
            "data wait: rank 1 on node-1 waits 21 ms of its 100 ms step for data (21 %): the loader cannot keep up "
            "(storage, decoding, augmentation)");
  ranks[1].step_s = 0;  // no step timed: nothing to compare with
  EXPECT_TRUE(rules.judge(ranks).empty());
}

TEST(HealthRules, MemoryGrowingInEachOfFiveReportsByMoreThanTenPercent) {
  auto report = [](HealthRules& rules, double rank1_mb) {
    auto ranks = steady(2);
    ranks[1].rss_mb = rank1_mb;
    return rules.judge(ranks);
  };
  {
    HealthRules rules;
    for (double mb : {1000.0, 1030.0, 1060.0, 1090.0, 1120.0}) EXPECT_TRUE(report(rules, mb).empty()) << mb;
    const auto warnings = report(rules, 1150.0);  // sixth report: five rises, 15 % in all
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_EQ(warnings[0],
              "memory: rank 1 on node-1 resident memory grew in each of the last 5 reports, 1000 -> 1150 MB");
    // The window slides: the last six reports are 1030 .. 1180, still growing by over 10 %.
    EXPECT_EQ(report(rules, 1180.0).size(), 1u);
    EXPECT_TRUE(report(rules, 1170.0).empty());  // one fall ends it
  }
  {  // growing every time, by 5 % in all: a cache filling up, not a leak
    HealthRules rules;
    for (double mb : {1000.0, 1010.0, 1020.0, 1030.0, 1040.0, 1050.0, 1060.0}) EXPECT_TRUE(report(rules, mb).empty());
  }
  {  // by 50 % but not in every report
    HealthRules rules;
    for (double mb : {1000.0, 1200.0, 1200.0, 1300.0, 1400.0, 1500.0}) EXPECT_TRUE(report(rules, mb).empty());
  }
}

TEST(HealthRules, WarningsRankByRankInTheOrderGiven) {
  HealthRules rules;
  std::vector<std::vector<RankInterval>> reports;
  for (int i = 0; i < 6; ++i) {
    auto ranks = steady(3);
    ranks[0].rss_mb = 1000.0 + 100.0 * i;  // rank 0: memory
    ranks[2].compute_s = 0.300;            // rank 2: straggler and data wait
    ranks[2].step_s = 0.400;
    ranks[2].data_s = 0.100;
    reports.push_back(ranks);
  }
  for (size_t i = 0; i + 1 < reports.size(); ++i) rules.judge(reports[i]);
  const auto warnings = rules.judge(reports.back());
  ASSERT_EQ(warnings.size(), 3u);
  EXPECT_EQ(warnings[0].rfind("memory: rank 0 on node-0", 0), 0u) << warnings[0];
  EXPECT_EQ(warnings[1].rfind("straggler: rank 2 on node-2", 0), 0u) << warnings[1];
  EXPECT_EQ(warnings[2].rfind("data wait: rank 2 on node-2", 0), 0u) << warnings[2];
}

}  // namespace
}  // namespace meridian::ops
