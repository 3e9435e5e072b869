// The loader's thread primitives (src/data): Channel, the bounded FIFO between a pipeline's threads,
// Pipeline, the loaders' read-ahead (its redirect: a share change without a restart), and
// WorkerPool, the decode threads. Closed-form expectations over many threads; with
// tests/sanitize.sh --thread these are also ThreadSanitizer's view of them.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "../../src/data/channel.h"
#include "../../src/data/pipeline.h"
#include "../../src/data/worker_pool.h"

using meridian::data::BatchIndex;
using meridian::data::Channel;
using meridian::data::DistributedSampler;
using meridian::data::Pipeline;
using meridian::data::WorkerPool;

TEST(Channel, EveryItemOfManyProducersReachesOneConsumerInEachProducersOrder) {
  constexpr int kProducers = 4, kConsumers = 3, kItems = 5000;
  Channel<std::pair<int, int>> channel(8);  // (producer, sequence number)
  std::vector<std::vector<std::pair<int, int>>> got(kConsumers);
  std::vector<std::thread> consumers, producers;
  for (int c = 0; c < kConsumers; ++c)
    consumers.emplace_back([&, c] {
      std::pair<int, int> item;
      while (channel.pop(item)) got[size_t(c)].push_back(item);
    });
  for (int p = 0; p < kProducers; ++p)
    producers.emplace_back([&, p] {
      for (int i = 0; i < kItems; ++i) ASSERT_TRUE(channel.push({p, i}));
    });
  for (auto& t : producers) t.join();
  channel.close();  // the consumers drain what is left, then pop returns false
  for (auto& t : consumers) t.join();
  std::vector<int64_t> count(kProducers, 0), sum(kProducers, 0);
  for (const auto& items : got) {
    std::vector<int> last(kProducers, -1);
    for (auto [p, i] : items) {
      EXPECT_GT(i, last[size_t(p)]) << "producer " << p << "'s items out of order";
      last[size_t(p)] = i;
      ++count[size_t(p)], sum[size_t(p)] += i;
    }
  }
  for (int p = 0; p < kProducers; ++p) {
    EXPECT_EQ(count[size_t(p)], kItems);
    EXPECT_EQ(sum[size_t(p)], int64_t(kItems) * (kItems - 1) / 2);
  }
}

TEST(Channel, CloseWakesAProducerBlockedOnAFullQueueAndAConsumerOnAnEmptyOne) {
  Channel<int> full(1), empty(1);
  ASSERT_TRUE(full.push(1));
  std::atomic<int> pushed{-1}, popped{-1};
  std::thread producer([&] { pushed = full.push(2) ? 1 : 0; });
  std::thread consumer([&] {
    int v;
    popped = empty.pop(v) ? 1 : 0;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // both blocked (not needed for the result)
  full.close();
  empty.close();
  producer.join();
  consumer.join();
  EXPECT_EQ(pushed, 0);  // a closed channel takes nothing more
  EXPECT_EQ(popped, 0);
  int v = 0;
  EXPECT_TRUE(full.pop(v));  // what was queued before close is still delivered
  EXPECT_EQ(v, 1);
  EXPECT_FALSE(full.pop(v));
}

TEST(Channel, ClearDropsWhatIsQueuedAndWakesAProducerWaitingForRoom) {
  Channel<int> channel(2);
  ASSERT_TRUE(channel.push(1));
  ASSERT_TRUE(channel.push(2));
  std::atomic<int> pushed{-1};
  std::thread producer([&] { pushed = channel.push(3) ? 1 : 0; });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // blocked on the full queue (not needed for the result)
  channel.clear();
  producer.join();
  EXPECT_EQ(pushed, 1);  // still open: the waiting push went in
  int v = 0;
  ASSERT_TRUE(channel.pop(v));
  EXPECT_EQ(v, 3);  // 1 and 2 were dropped
  channel.close();
  EXPECT_FALSE(channel.pop(v));
}

namespace {
// What the test pipeline reads: the sampler's rows for the batch, and the thread that read them.
struct RowsBatch {
  std::vector<int64_t> rows;
  std::thread::id reader;
  int64_t epoch = 0, step = 0, next_position = 0;
  double wait_s = 0;
};
}  // namespace

TEST(Pipeline, ARedirectTakesNewSharesAtItsPositionOnTheSameThreadsDroppingWhatWasReadAhead) {
  // 2 ranks x 4, 50 samples (6 global batches an epoch, drop_last); rank 1's view. The pipeline
  // reads 4 batches ahead at least (prefetch 2, a finish thread); each read is slow enough that
  // redirects land while batches wait in both channels and while a read runs.
  for (bool finish_thread : {false, true}) {
    SCOPED_TRACE(finish_thread ? "finish thread" : "I/O thread finishes");
    DistributedSampler sampler(50, 4, 1, 2, 11, true);
    std::atomic<int> reads{0};
    Pipeline<RowsBatch>::Read read = [&](const BatchIndex& at) {
      ++reads;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      return RowsBatch{sampler.batch(at.epoch, at.position), std::this_thread::get_id()};
    };
    Pipeline<RowsBatch>::Finish finish = [](RowsBatch&& b, const BatchIndex&) { return std::move(b); };
    Pipeline<RowsBatch> pipeline("test", sampler, 0, 0, 2, read, finish, finish_thread);
    // The expected batches: a sampler of its own with the shares in force, at each position.
    DistributedSampler expect(50, 4, 1, 2, 11, true);
    std::set<std::thread::id> readers;
    int64_t epoch = 0, position = 0;
    const auto take = [&](int n) {
      for (int i = 0; i < n; ++i) {
        if (position >= expect.epoch_samples()) ++epoch, position = 0;
        RowsBatch b = pipeline.next();
        ASSERT_EQ(b.epoch, epoch);
        ASSERT_EQ(b.step, position / 8);
        ASSERT_EQ(b.rows, expect.batch(epoch, position)) << "epoch " << epoch << ", position " << position;
        readers.insert(b.reader);
        position = b.next_position;
      }
    };
    take(3);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the channels full again
    // New shares from the next batch on: rank 1 takes 2 of 8, then 7 of 8 after two redirects in a
    // row (both changes run, the second's position counts).
    pipeline.redirect(epoch, position, [&] { sampler.set_shares({6, 2}); });
    expect.set_shares({6, 2});
    take(4);  // into the next epoch
    pipeline.redirect(epoch, position, [&] { sampler.set_shares({3, 5}); });
    pipeline.redirect(epoch, position, [&] { sampler.set_shares({1, 7}); });
    expect.set_shares({1, 7});
    take(2);
    // Back to an earlier position (a rewind), even shares.
    epoch = 0, position = 16;
    pipeline.redirect(epoch, position, [&] { sampler.set_shares({}); });
    expect.set_shares({});
    take(8);
    EXPECT_EQ(readers.size(), 1u) << "a redirect started a new I/O thread";
    EXPECT_GE(reads.load(), 17);
  }
}

TEST(Pipeline, AReadErrorIsRethrownByNextAfterTheBatchesBeforeIt) {
  DistributedSampler sampler(50, 4, 0, 1, 3, true);
  Pipeline<RowsBatch> pipeline("test", sampler, 0, 0, 2, [&](const BatchIndex& at) {
    if (at.position >= 8) throw std::runtime_error("bad row at " + std::to_string(at.position));
    return RowsBatch{sampler.batch(at.epoch, at.position), std::this_thread::get_id()};
  });
  EXPECT_EQ(pipeline.next().next_position, 4);
  EXPECT_EQ(pipeline.next().next_position, 8);
  EXPECT_THROW(pipeline.next(), std::runtime_error);
}

TEST(WorkerPool, EachIndexRunsOnceOnTheCallerAndItsThreadsOverManyRounds) {
  for (int threads : {0, 1, 3}) {
    WorkerPool pool(threads);
    ASSERT_EQ(pool.workers(), threads + 1);
    for (int round = 0; round < 200; ++round) {
      const int64_t n = round % 17;  // empty rounds too
      std::vector<int64_t> out(size_t(n), -1);
      std::vector<int> worker(size_t(n), -1);
      pool.for_each(n, [&](int64_t i, int w) {
        out[size_t(i)] = i * i + round;
        worker[size_t(i)] = w;
      });
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_EQ(out[size_t(i)], i * i + round);
        EXPECT_GE(worker[size_t(i)], 0);
        EXPECT_LE(worker[size_t(i)], threads);
      }
    }
  }
}

TEST(WorkerPool, TheFirstErrorIsRethrownAfterEveryCallHasEnded) {
  WorkerPool pool(3);
  std::atomic<int> running{0};
  EXPECT_THROW(pool.for_each(400,
                             [&](int64_t i, int) {
                               ++running;
                               if (i == 7) {
                                 --running;
                                 throw std::runtime_error("index 7");
                               }
                               std::this_thread::sleep_for(std::chrono::microseconds(200));
                               --running;
                             }),
               std::runtime_error);
  EXPECT_EQ(running, 0);  // no call still running when for_each returned
  // The pool is usable after a failed round.
  std::atomic<int64_t> sum{0};
  pool.for_each(100, [&](int64_t i, int) { sum += i; });
  EXPECT_EQ(sum, 99 * 100 / 2);
}
