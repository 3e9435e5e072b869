// The loader's thread primitives (src/data): Channel, the bounded FIFO between a pipeline's threads,
// and WorkerPool, the decode threads. Closed-form expectations over many threads; with
// tests/sanitize.sh --thread these are also ThreadSanitizer's view of them.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "../../src/data/channel.h"
#include "../../src/data/worker_pool.h"

using meridian::data::Channel;
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
  full.reopen();  // empty and open again
  EXPECT_TRUE(full.push(3));
  EXPECT_TRUE(full.pop(v));
  EXPECT_EQ(v, 3);
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
