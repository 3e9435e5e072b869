// comm::choose_threads: the intra-op threads of a rank from the machine's free cores, and why.
#include <gtest/gtest.h>

#include "meridian/comm/runtime.h"

using meridian::comm::choose_threads;
using meridian::comm::ThreadInputs;

namespace {
ThreadInputs machine(int cores, int machine_ranks, int node_ranks) {
  ThreadInputs in;
  in.cores = cores, in.machine_ranks = machine_ranks, in.node_ranks = node_ranks;
  in.bound_cpus = cores, in.ranks_bound_alike = node_ranks;
  return in;
}
bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
}  // namespace

TEST(ChooseThreads, TheMachinesCoresSplitOverItsRanks) {
  auto c = choose_threads(machine(2, 1, 1));
  EXPECT_EQ(c.threads, 2);
  EXPECT_FALSE(c.crowded);
  EXPECT_TRUE(has(c.why, "2: 2 cores on this machine for 1 rank of the job")) << c.why;
  EXPECT_TRUE(has(c.why, "OpenMP workers spin briefly, then sleep")) << c.why;
  c = choose_threads(machine(16, 4, 4));
  EXPECT_EQ(c.threads, 4);
  c = choose_threads(machine(2, 2, 2));
  EXPECT_EQ(c.threads, 1);
  EXPECT_TRUE(has(c.why, "no OpenMP worker threads")) << c.why;
}

TEST(ChooseThreads, NodesOfAVirtualClusterShareTheirMachinesCores) {
  // 2 "nodes" (network namespaces), one rank each, one kernel: 1 thread each, not 2 (4 on 2 cores
  // made a step 22-47x slower).
  const auto c = choose_threads(machine(2, 2, 1));
  EXPECT_EQ(c.threads, 1);
  EXPECT_TRUE(has(c.why, "ranks of other nodes share this machine: the same kernel boot id")) << c.why;
}

// More ranks on the machine than free cores: oversubscribed (MPI's waits must yield), whatever the
// threads; as many ranks as cores is not.
TEST(ChooseThreads, MoreRanksThanFreeCoresIsOversubscribed) {
  EXPECT_TRUE(choose_threads(machine(2, 3, 1)).oversubscribed);  // 3 virtual nodes on 2 cores
  EXPECT_TRUE(choose_threads(machine(2, 3, 3)).oversubscribed);  // mpirun --oversubscribe -np 3
  EXPECT_FALSE(choose_threads(machine(2, 2, 1)).oversubscribed);
  EXPECT_FALSE(choose_threads(machine(16, 8, 8)).oversubscribed);
  auto busy = machine(4, 3, 3);
  busy.others_cores = 2.0;  // 2 of the 4 cores kept busy by another process: 2 free for 3 ranks
  EXPECT_TRUE(choose_threads(busy).oversubscribed);
}

TEST(ChooseThreads, CoresOtherProcessesKeepBusyAreLeftToThem) {
  auto in = machine(2, 1, 1);
  in.others_cores = 1.1;
  auto c = choose_threads(in);
  EXPECT_EQ(c.threads, 1);
  EXPECT_TRUE(has(c.why, "1.1 of them busy with other processes")) << c.why;
  in.others_cores = 0.3;  // a shell, a daemon: not a core
  EXPECT_EQ(choose_threads(in).threads, 2);
  in = machine(16, 4, 4);
  in.others_cores = 3.6;  // 4 busy: 12 free, 3 each
  EXPECT_EQ(choose_threads(in).threads, 3);
  in.others_cores = 40;  // more than the machine: still 1
  EXPECT_EQ(choose_threads(in).threads, 1);
}

TEST(ChooseThreads, BoundCpusCap) {
  auto in = machine(8, 1, 1);
  in.bound_cpus = 1;
  const auto c = choose_threads(in);
  EXPECT_EQ(c.threads, 1);
  EXPECT_TRUE(has(c.why, "bound to 1 CPU for 1 rank")) << c.why;
  in.bound_cpus = 4, in.ranks_bound_alike = 2;  // two ranks bound to the same 4 CPUs
  EXPECT_EQ(choose_threads(in).threads, 2);
}

TEST(ChooseThreads, TheUsersChoiceWinsAndIsWarnedWhenItCrowdsTheCores) {
  auto in = machine(2, 2, 1);
  in.requested = 2;
  auto c = choose_threads(in);
  EXPECT_EQ(c.threads, 2);
  EXPECT_TRUE(c.crowded);
  EXPECT_TRUE(has(c.why, "2 (from --threads)")) << c.why;
  EXPECT_TRUE(has(c.why, "2 threads x 2 ranks on 2 free cores")) << c.why;
  EXPECT_TRUE(has(c.why, "use --threads 1")) << c.why;
  in = machine(8, 1, 1);
  in.omp_num_threads = 3;
  in.requested = 0;
  in.wait_policy = "passive";
  c = choose_threads(in);
  EXPECT_EQ(c.threads, 3);
  EXPECT_FALSE(c.crowded);
  EXPECT_TRUE(has(c.why, "3 (from OMP_NUM_THREADS)")) << c.why;
  EXPECT_TRUE(has(c.why, "OpenMP workers wait by OMP_WAIT_POLICY=passive")) << c.why;
}
