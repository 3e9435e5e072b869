// The distributed sampler for several world sizes in one process (rank and size are parameters).
#include "meridian/data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "meridian/core/error.h"

using meridian::data::DistributedSampler;
using meridian::data::permute;

TEST(Permute, IsABijectionForManySizesAndKeys) {
  for (int64_t n : {1, 2, 3, 7, 64, 1000, 4097}) {
    for (uint64_t key : {0ull, 1ull, 12345ull}) {
      std::vector<int64_t> seen(n, 0);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t p = permute(i, n, key);
        ASSERT_GE(p, 0);
        ASSERT_LT(p, n);
        ++seen[p];
      }
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int64_t c) { return c == 1; })) << "n " << n;
    }
  }
  // Different keys give different orders (a shuffle, not the identity).
  int same = 0, identity = 0;
  for (int64_t i = 0; i < 1000; ++i)
    same += permute(i, 1000, 1) == permute(i, 1000, 2), identity += permute(i, 1000, 1) == i;
  EXPECT_LT(same, 50);
  EXPECT_LT(identity, 50);
}

// Every rank's rows of one epoch, in global-position order.
std::vector<std::vector<int64_t>> epoch_rows(int64_t n, int64_t b, int world, uint64_t seed, bool drop_last,
                                             int64_t epoch) {
  std::vector<std::vector<int64_t>> per_rank(world);
  for (int r = 0; r < world; ++r) {
    DistributedSampler s(n, b, r, world, seed, drop_last);
    for (int64_t step = 0; step < s.steps_per_epoch(); ++step) {
      auto rows = s.batch(epoch, step * s.global_batch());
      per_rank[r].insert(per_rank[r].end(), rows.begin(), rows.end());
    }
  }
  return per_rank;
}

TEST(DistributedSampler, NoOverlapAndFullCoverageOn1_2_4Ranks) {
  for (int world : {1, 2, 4}) {
    const int64_t n = 96, b = 3;  // 96 divisible by 3 x {1, 2, 4}
    const auto rows = epoch_rows(n, b, world, 7, true, 0);
    std::set<int64_t> all;
    for (const auto& r : rows) {
      EXPECT_EQ(int64_t(r.size()), n / world) << "world " << world;
      for (int64_t x : r) EXPECT_TRUE(all.insert(x).second) << "row " << x << " twice, world " << world;
    }
    EXPECT_EQ(int64_t(all.size()), n) << "world " << world;
  }
}

TEST(DistributedSampler, DropLastAndPadding) {
  const int64_t n = 37, b = 3;
  for (int world : {1, 2, 4}) {
    const int64_t g = b * world;
    DistributedSampler s(n, b, 0, world, 1, true);
    EXPECT_EQ(s.steps_per_epoch(), n / g);
    std::set<int64_t> dropped;
    for (const auto& r : epoch_rows(n, b, world, 1, true, 0)) dropped.insert(r.begin(), r.end());
    EXPECT_EQ(int64_t(dropped.size()), (n / g) * g);  // distinct, the tail left out this epoch

    DistributedSampler p(n, b, 0, world, 1, false);
    EXPECT_EQ(p.steps_per_epoch(), (n + g - 1) / g);
    std::multiset<int64_t> padded;
    for (const auto& r : epoch_rows(n, b, world, 1, false, 0)) padded.insert(r.begin(), r.end());
    EXPECT_EQ(int64_t(padded.size()), p.steps_per_epoch() * g);
    for (int64_t x = 0; x < n; ++x) EXPECT_GE(padded.count(x), 1u) << "row " << x << " missing with padding";
  }
}

TEST(DistributedSampler, EpochsShuffleDifferentlyAndDeterministically) {
  const auto e0 = epoch_rows(200, 4, 2, 3, true, 0), e0_again = epoch_rows(200, 4, 2, 3, true, 0);
  const auto e1 = epoch_rows(200, 4, 2, 3, true, 1), other_seed = epoch_rows(200, 4, 2, 4, true, 0);
  EXPECT_EQ(e0, e0_again);
  EXPECT_NE(e0, e1);
  EXPECT_NE(e0, other_seed);
}

TEST(DistributedSampler, ResumeOnAnotherWorldSizeNeitherLosesNorRepeats) {
  // 4 ranks x batch 2 consume 5 global batches (40 samples); then 2 ranks x batch 4 continue from
  // global position 40. Together they visit exactly the rows of the uninterrupted epoch.
  const int64_t n = 120;
  std::multiset<int64_t> visited;
  for (int r = 0; r < 4; ++r) {
    DistributedSampler s(n, 2, r, 4, 9, true);
    for (int64_t step = 0; step < 5; ++step)
      for (int64_t x : s.batch(0, step * s.global_batch())) visited.insert(x);
  }
  for (int r = 0; r < 2; ++r) {
    DistributedSampler s(n, 4, r, 2, 9, true);
    for (int64_t pos = 40; pos < s.epoch_samples(); pos += s.global_batch())
      for (int64_t x : s.batch(0, pos)) visited.insert(x);
  }
  std::multiset<int64_t> straight;
  DistributedSampler one(n, 1, 0, 1, 9, true);
  for (int64_t pos = 0; pos < n; ++pos) straight.insert(one.row(0, pos));
  EXPECT_EQ(visited, straight);
  EXPECT_EQ(visited.size(), size_t(n));
}

TEST(DistributedSampler, UnevenSharesAreContiguousAndFormTheSameGlobalBatch) {
  // 3 ranks x 4 = 12 per global batch; shares 7, 3, 2: rank r takes [offset, offset + share).
  const int64_t n = 50, start = 12;
  std::multiset<int64_t> even, uneven;
  const std::vector<int64_t> shares{7, 3, 2};
  int64_t offset = 0;
  for (int r = 0; r < 3; ++r) {
    DistributedSampler a(n, 4, r, 3, 7, true), b(n, 4, r, 3, 7, true);
    for (int64_t row : a.batch(1, start)) even.insert(row);
    b.set_shares(shares);
    EXPECT_EQ(b.share(), shares[size_t(r)]);
    EXPECT_EQ(b.max_share(), 7);
    const auto rows = b.batch(1, start);
    ASSERT_EQ(int64_t(rows.size()), shares[size_t(r)]);
    for (size_t j = 0; j < rows.size(); ++j) EXPECT_EQ(rows[j], b.row(1, start + offset + int64_t(j)));
    uneven.insert(rows.begin(), rows.end());
    offset += shares[size_t(r)];
    b.set_shares({});  // even again: the interleaved split
    EXPECT_EQ(b.batch(1, start), a.batch(1, start));
  }
  EXPECT_EQ(even, uneven);
  DistributedSampler s(n, 4, 0, 3, 7, true);
  EXPECT_THROW(s.set_shares({6, 6}), std::invalid_argument);      // one per rank
  EXPECT_THROW(s.set_shares({10, 1, 0}), std::invalid_argument);  // at least 1 each
  EXPECT_THROW(s.set_shares({5, 5, 3}), std::invalid_argument);   // sum 13, not 12
}

TEST(DistributedSampler, RejectsBadArguments) {
  EXPECT_THROW(DistributedSampler(0, 1, 0, 1, 0, true), std::invalid_argument);
  EXPECT_THROW(DistributedSampler(10, 0, 0, 1, 0, true), std::invalid_argument);
  EXPECT_THROW(DistributedSampler(10, 1, 2, 2, 0, true), std::invalid_argument);
}

// What the loaders build: an empty dataset or one with less than a global batch is a UserError
// naming the file in the config's words (never the sampler's internal invalid_argument).
TEST(DistributedSampler, ForLoaderNamesTheFileAndTheConfigKey) {
  const auto message = [](int64_t n, int64_t batch, int ranks) {
    try {
      DistributedSampler::for_loader("d.h5", n, "samples", batch, 0, ranks, 0, true);
    } catch (const meridian::UserError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(0, 4, 2), "d.h5: it has no samples");
  EXPECT_EQ(
      message(7, 4, 2),
      "d.h5: 7 samples are fewer than one global batch (8 = train.batch 4 per rank x 2 ranks); lower train.batch");
  EXPECT_EQ(message(8, 4, 2), "no error");
  EXPECT_EQ(DistributedSampler::for_loader("d.h5", 9, "samples", 4, 1, 2, 0, true)->steps_per_epoch(), 1);
}
