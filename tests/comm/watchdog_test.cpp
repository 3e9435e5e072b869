#include "meridian/comm/watchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

using meridian::comm::Watchdog;
using namespace std::chrono_literals;

TEST(Watchdog, FiresOnceForAnOperationPastItsTimeout) {
  std::atomic<int> fired{0};
  std::string what;
  double elapsed = 0;
  std::mutex mu;
  Watchdog wd(0.2, [&](const std::string& d, double e) {
    std::lock_guard<std::mutex> lock(mu);
    what = d;
    elapsed = e;
    ++fired;
  });
  wd.begin("allreduce(sum) of 4096 bytes");
  const auto start = std::chrono::steady_clock::now();
  while (fired == 0 && std::chrono::steady_clock::now() - start < 5s) std::this_thread::sleep_for(5ms);
  std::this_thread::sleep_for(300ms);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(what, "allreduce(sum) of 4096 bytes");
  EXPECT_GE(elapsed, 0.2);
  EXPECT_LT(elapsed, 2.0);
}

TEST(Watchdog, QuietWhenOperationsEndInTime) {
  std::atomic<int> fired{0};
  Watchdog wd(0.3, [&](const std::string&, double) { ++fired; });
  for (int i = 0; i < 20; ++i) {
    const auto id = wd.begin("barrier");
    std::this_thread::sleep_for(20ms);
    wd.end(id);
  }
  std::this_thread::sleep_for(500ms);  // nothing pending: nothing can fire
  EXPECT_EQ(fired, 0);
}

TEST(Watchdog, OnlyTheStuckOperationCounts) {
  std::atomic<int> fired{0};
  std::string what;
  Watchdog wd(0.3, [&](const std::string& d, double) { what = d, ++fired; });
  const auto quick = wd.begin("quick");
  wd.begin("stuck");
  wd.end(quick);
  std::this_thread::sleep_for(800ms);
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(what, "stuck");
}
