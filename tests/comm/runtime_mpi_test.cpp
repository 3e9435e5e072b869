#include <gtest/gtest.h>

#include <cstdlib>

#include "meridian/core/error.h"
#include "mpi_test_main.h"

using meridian::test::runtime;

TEST(Runtime, WorldMatchesLauncher) {
  const auto& rt = runtime();
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  ASSERT_NE(size, nullptr) << "tests must run under Open MPI's mpirun";
  EXPECT_EQ(rt.size(), std::atoi(size));
  EXPECT_EQ(rt.rank(), std::atoi(std::getenv("OMPI_COMM_WORLD_RANK")));
  EXPECT_EQ(meridian::process_identity().rank, rt.rank());
}

TEST(Runtime, SingleHostTopology) {
  // ctest starts every rank on this one machine.
  const auto& rt = runtime();
  EXPECT_EQ(rt.node_count(), 1);
  EXPECT_EQ(rt.local_size(), rt.size());
  EXPECT_EQ(rt.local_rank(), rt.rank());
  EXPECT_FALSE(rt.host().empty());
  const char* device = std::getenv("MERIDIAN_TEST_DEVICE");
  if (device && std::string(device) == "cuda")
    EXPECT_EQ(rt.device(), c10::Device(c10::kCUDA, rt.local_rank()));
  else
    EXPECT_TRUE(rt.device().is_cpu());
  EXPECT_GE(rt.threads(), 1);
}

TEST(Runtime, AllgatherAndGatherStrings) {
  const auto& rt = runtime();
  const std::string mine(rt.rank() + 1, static_cast<char>('a' + rt.rank()));  // rank 2: "ccc"
  const auto all = rt.allgather(mine);
  ASSERT_EQ(static_cast<int>(all.size()), rt.size());
  for (int r = 0; r < rt.size(); ++r) EXPECT_EQ(all[r], std::string(r + 1, static_cast<char>('a' + r)));
  const auto at_root = rt.gather_to_root(mine);
  if (rt.rank() == 0)
    EXPECT_EQ(at_root, all);
  else
    EXPECT_TRUE(at_root.empty());
}

TEST(Runtime, AllTrueAgreesAcrossRanks) {
  const auto& rt = runtime();
  EXPECT_TRUE(rt.all_true(true));
  EXPECT_FALSE(rt.all_true(rt.rank() != rt.size() - 1));  // false on the last rank only
}

TEST(Runtime, BroadcastBytes) {
  const auto& rt = runtime();
  int64_t values[3] = {rt.rank(), rt.rank() * 10, -1};
  const int root = rt.size() - 1;
  rt.broadcast_bytes(values, sizeof(values), root);
  EXPECT_EQ(values[0], root);
  EXPECT_EQ(values[1], root * 10);
}
