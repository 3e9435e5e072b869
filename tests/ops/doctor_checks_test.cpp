// The checks of `meridian doctor` on fabricated facts: no MPI, no probing of this machine.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "meridian/ops/checks.h"

namespace meridian::ops {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

// A healthy job: `nodes` nodes ("node-a", "node-b", ...) with `per_node` ranks each, on CPUs.
std::vector<RankFacts> healthy(int nodes, int per_node) {
  std::vector<RankFacts> facts;
  for (int n = 0; n < nodes; ++n)
    for (int l = 0; l < per_node; ++l) {
      RankFacts f;
      f.rank = static_cast<int>(facts.size());
      f.local_rank = l;
      f.local_size = per_node;
      f.host = std::string("node-") + char('a' + n);
      f.device = "cpu";
      f.cores = 16;
      f.bound_cpus = 8;
      f.threads = 8;
      f.memory = {64 * kGiB, 48 * kGiB};
      f.run_dir = {"/runs", 500 * kGiB, "", true};
      f.shm = {16 * kGiB, 16 * kGiB, ""};
      f.gpu.inventory.queryable = false;
      f.gpu.inventory.note = "CPU-only build";
      f.versions = {"meridian 0.1.0 (git abc, Release)",
                    "00112233aabbccdd",
                    "2.15.0",
                    "Open MPI v4.1.4",
                    "none",
                    "LibTorch's CUDA 13.2, cuDNN 9.26.0; toolkit 13.0.88 at build"};
      f.env = {{"OMPI_MCA_btl_tcp_if_include", "eth0"}};
      const std::string address = "198.18.0." + std::to_string(n + 1);
      f.network = {{address}, {"eth0 " + address}};
      f.data = DataFacts{
          "/data/train.h5", "image_text", "train", "meridian 0.1.0: prep", 1, 1000, 4096, "0123456789abcdef", ""};
      facts.push_back(f);
    }
  return facts;
}

// A measured pair: one-way latency in us and bandwidth in GB/s, 4 MiB messages.
LinkFacts link(int a, int b, double latency_us, double gbs) {
  LinkFacts l;
  l.latency = {a, b, 8, 50, latency_us, 0};
  l.bandwidth = {a, b, 4u << 20, 10, latency_us + 100, gbs};
  return l;
}

// Every pair of `ranks` at the same speed.
std::vector<LinkFacts> all_pairs(const std::vector<int>& ranks, double latency_us, double gbs) {
  std::vector<LinkFacts> links;
  for (size_t i = 0; i < ranks.size(); ++i)
    for (size_t j = i + 1; j < ranks.size(); ++j) links.push_back(link(ranks[i], ranks[j], latency_us, gbs));
  return links;
}

Findings with_status(const Findings& findings, Status status) {
  Findings out;
  for (const auto& f : findings)
    if (f.status == status) out.push_back(f);
  return out;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(DoctorChecks, HealthyJobIsAllOk) {
  const auto facts = healthy(2, 2);
  std::vector<Findings> all{check_cores(facts),
                            check_cpu(facts),
                            check_memory(facts),
                            check_disk(facts),
                            check_shm(facts),
                            check_gpus(facts),
                            check_versions(facts),
                            check_hostnames(facts, 2),
                            check_shared_dir(facts, 2),
                            check_environment(facts),
                            check_interfaces(facts, 2),
                            check_data(facts),
                            check_links(facts, {link(0, 2, 20, 1.1)}, true),
                            check_allreduce({4, "mpi", 32u << 20, 2.5, 30000, 0}),
                            check_clocks(facts, {{0, 0}, {0.001, 0.0001}, {0.002, 0.0001}, {-0.003, 0.0001}})};
  for (const auto& findings : all)
    for (const auto& f : findings) {
      EXPECT_EQ(f.status, Status::Ok) << f.check << ": " << f.text;
      EXPECT_TRUE(f.hint.empty()) << f.check;
    }
  EXPECT_EQ(check_cores(facts).size(), 2u);  // one line per node
  // Nodes of one machine (the same boot id: a virtual cluster) with more ranks than its cores: each
  // node's line says so, and how MPI waits there.
  auto shared = healthy(3, 1);
  for (auto& f : shared) f.cores = 2, f.bound_cpus = 2, f.threads = 1, f.cpu.machine = "boot-1";
  shared[0].mpi_waits = "MPI waits yield the core (Open MPI's mpi_yield_when_idle, switched on by meridian): 3 ranks";
  const auto cores = check_cores(shared);
  ASSERT_EQ(cores.size(), 3u);
  EXPECT_EQ(cores[0].status, Status::Warn);
  EXPECT_NE(cores[0].text.find(
                "node-a: 2 cores, 1 rank(s) (0), bound CPUs 2 each, threads 1 each: oversubscribed: 3 ranks of "
                "the job on this machine's 2 cores (other nodes share it); MPI waits yield the core"),
            std::string::npos)
      << cores[0].text;
  shared[2].cpu.machine = "boot-2";  // node-c on a machine of its own: node-a's machine holds 2 ranks on 2 cores
  for (const auto& f : check_cores(shared)) EXPECT_EQ(f.status, Status::Ok) << f.text;
  EXPECT_EQ(check_disk(facts)[0].text, "node-a: run dir /runs: 500.0 GiB free");
  EXPECT_EQ(check_versions(facts)[3].text, "Open MPI v4.1.4 on all 4 ranks");
  EXPECT_TRUE(check_hostnames(facts, 2).empty());
  EXPECT_EQ(check_shared_dir(facts, 2)[0].text, "/runs: every rank sees rank 0's file there");
  EXPECT_EQ(check_interfaces(facts, 2)[1].text, "node-b: resolves to 198.18.0.2; interfaces eth0 198.18.0.2");
  EXPECT_EQ(check_data(facts)[0].text,
            "/data/train.h5: image_text 1000 sample(s), 4096 bytes, first MiB fnv 0123456789abcdef on all 4 ranks");
  EXPECT_EQ(check_allreduce({4, "mpi", 32u << 20, 2.5, 30000, 0})[0].text,
            "4 ranks, mpi, 32 MiB float32: busbw 2.50 GB/s, 30000 us");
  EXPECT_EQ(check_clocks(facts, {{0, 0}, {0.001, 0.0001}, {0.002, 0.0001}, {-0.003, 0.0001}})[0].text,
            "largest offset to rank 0: 3.000 ms (rank 3 (node-b), +-0.100 ms)");
}

TEST(DoctorChecks, SharedCpuNamesTheCause) {
  auto facts = healthy(3, 1);
  for (auto& f : facts) f.cpu = {"boot-" + f.host, 0.1, 0.0, 0.0, 1.0, {}};
  EXPECT_EQ(check_cpu(facts)[0].text,
            "node-a: 16 cores; over 0.5 s: 0 % steal, 1.0 runnable threads, other processes 0.0 cores busy");
  facts[0].cpu.steal_pct = 14;  // an overcommitted VM host
  facts[1].cpu.others_cores = 2.0, facts[1].cpu.busy_cores = 2.1;
  facts[1].cpu.others = {"pid 812 (stress) 1.0 cores", "pid 813 (stress) 1.0 cores"};
  facts[2].cpu.runnable = 20;
  const auto findings = check_cpu(facts);
  ASSERT_EQ(findings.size(), 3u);
  for (const auto& f : findings) EXPECT_EQ(f.status, Status::Warn) << f.text;
  EXPECT_TRUE(contains(findings[0].text, "node-a: 16 cores; over 0.5 s: 14 % steal")) << findings[0].text;
  EXPECT_TRUE(contains(findings[0].hint, "overcommitted")) << findings[0].hint;
  EXPECT_TRUE(contains(findings[1].text,
                       "other processes 2.0 cores busy: CPU shared with pid 812 (stress) 1.0 cores, pid 813 (stress) "
                       "1.0 cores"))
      << findings[1].text;
  EXPECT_TRUE(contains(findings[2].text, "CPU shared: 20.0 runnable threads on 16 cores")) << findings[2].text;
  // Nodes on one kernel (a virtual cluster): said, not warned.
  facts = healthy(2, 1);
  for (auto& f : facts) f.cpu = {"same-boot-id", 0.1, 0.0, 0.0, 1.0, {}};
  const auto shared = check_cpu(facts);
  EXPECT_EQ(shared[0].status, Status::Ok);
  EXPECT_TRUE(
      contains(shared[0].text, "one machine with node-b (the same kernel boot id): their ranks share its cores"))
      << shared[0].text;
}

TEST(DoctorChecks, SlowLinkBetweenTwoNodes) {
  const auto facts = healthy(4, 1);
  auto links = all_pairs({0, 1, 2, 3}, 20, 1.0);
  links[1] = link(0, 2, 20, 0.1);  // node-a <-> node-c: a tenth of the others
  const Findings findings = check_links(facts, links, true);
  const Findings warn = with_status(findings, Status::Warn);
  ASSERT_EQ(warn.size(), 1u);
  EXPECT_EQ(warn[0].check, "p2p");
  EXPECT_TRUE(contains(warn[0].text, "node-a r0 <-> node-c r2: latency 20.0 us, bandwidth 0.10 GB/s (4 MiB messages)"))
      << warn[0].text;
  EXPECT_TRUE(contains(warn[0].text, ": slow link (median of all pairs: 20.0 us, 1.00 GB/s)")) << warn[0].text;
  EXPECT_TRUE(contains(warn[0].hint, "check the NIC's speed")) << warn[0].hint;
  EXPECT_EQ(findings.size(), 6u);  // one line per pair, no slow rank: the other links of ranks 0 and 2 are fast
}

TEST(DoctorChecks, SlowRankHasAllItsLinksSlow) {
  const auto facts = healthy(1, 4);
  auto links = all_pairs({0, 1, 2, 3}, 5, 4.0);
  for (auto& l : links)
    if (l.bandwidth.a == 1 || l.bandwidth.b == 1) l = link(l.bandwidth.a, l.bandwidth.b, 2000, 0.5);
  const Findings slow = [&] {
    Findings out;
    for (const auto& f : check_links(facts, links, false))
      if (f.check == "slow rank") out.push_back(f);
    return out;
  }();
  ASSERT_EQ(slow.size(), 1u);
  EXPECT_EQ(slow[0].status, Status::Warn);
  EXPECT_EQ(slow[0].text,
            "rank 1 (node-a): its 3 link(s) reach 2000.0 us, 0.50 GB/s at best; the links between the others 5.0 us, "
            "4.00 GB/s");
  EXPECT_TRUE(contains(slow[0].hint, "its core is busy")) << slow[0].hint;  // one node: the shared-memory hint
}

TEST(DoctorChecks, SlowNodeOfThreeIsNamedAloneEvenWithANoisyLink) {
  // node-c's link at 3 MB/s; the node-a <-> node-b link had a latency spike while measured. node-b
  // has one slow link (to node-c) and one noisy one: its best link is fine, so only node-c is named.
  const auto facts = healthy(3, 1);
  const std::vector<LinkFacts> links{link(0, 1, 80, 0.13), link(0, 2, 60, 0.003), link(1, 2, 60, 0.003)};
  Findings slow;
  for (const auto& f : check_links(facts, links, true))
    if (f.check == "slow rank") slow.push_back(f);
  ASSERT_EQ(slow.size(), 1u);
  EXPECT_EQ(slow[0].text,
            "rank 2 (node-c): its 2 link(s) reach 60.0 us, 3.0 MB/s at best; the links between the others 80.0 us, "
            "0.13 GB/s");
}

TEST(DoctorChecks, HealthIgnoresLatencyAloneOfARankWithABusyCore) {
  // node-c answers the ping-pong in 2 ms (its core shared with a busy process) at full bandwidth: a
  // slow rank for doctor, which measures an idle cluster, but no slow link for health's bandwidth rule.
  const auto facts = healthy(3, 1);
  const std::vector<LinkFacts> links{link(0, 1, 22, 0.15), link(0, 2, 2000, 0.14), link(1, 2, 2000, 0.14)};
  const auto slow_ranks = [&](const std::vector<LinkFacts>& measured, LinkEvidence evidence) {
    int n = 0;
    for (const auto& f : check_links(facts, measured, true, evidence)) n += f.check == "slow rank";
    return n;
  };
  EXPECT_EQ(slow_ranks(links, LinkEvidence::LatencyOrBandwidth), 1);
  EXPECT_EQ(slow_ranks(links, LinkEvidence::BandwidthOnly), 0);
  // A slow bandwidth is named under either rule.
  const std::vector<LinkFacts> throttled{link(0, 1, 22, 0.15), link(0, 2, 22, 0.003), link(1, 2, 22, 0.003)};
  EXPECT_EQ(slow_ranks(throttled, LinkEvidence::LatencyOrBandwidth), 1);
  EXPECT_EQ(slow_ranks(throttled, LinkEvidence::BandwidthOnly), 1);
}

TEST(DoctorChecks, VersionMismatchBetweenNodesFails) {
  auto facts = healthy(2, 2);
  for (int r : {2, 3}) facts[r].versions.mpi = "Open MPI v4.1.5";
  const Findings findings = check_versions(facts);
  const Findings fail = with_status(findings, Status::Fail);
  ASSERT_EQ(fail.size(), 1u);
  EXPECT_EQ(fail[0].check, "mpi");
  EXPECT_EQ(fail[0].text, "differs: ranks 0-1 (node-a) has Open MPI v4.1.4; ranks 2-3 (node-b) has Open MPI v4.1.5");
  EXPECT_TRUE(contains(fail[0].hint, "the same Open MPI")) << fail[0].hint;
  EXPECT_TRUE(with_status(findings, Status::Warn).empty());

  // A binary that differs alone is a warning (each node may have built the same commit).
  facts = healthy(2, 2);
  facts[3].versions.binary = "ffffffffffffffff";
  const Findings warn = with_status(check_versions(facts), Status::Warn);
  ASSERT_EQ(warn.size(), 1u);
  EXPECT_EQ(warn[0].check, "binary");
  EXPECT_TRUE(contains(warn[0].text, "rank 3 (node-b) has fnv ffffffffffffffff")) << warn[0].text;
}

TEST(DoctorChecks, LowAndFullDisk) {
  auto facts = healthy(3, 2);
  facts[1].run_dir.free = 5 * kGiB;    // node-a: its worst rank speaks for it
  facts[2].run_dir.free = 0.5 * kGiB;  // node-b: full
  facts[5].run_dir = {"/ro", 0, "cannot write a file there: Read-only file system", true};  // node-c
  const Findings findings = check_disk(facts);
  ASSERT_EQ(findings.size(), 3u);
  EXPECT_EQ(findings[0].status, Status::Warn);
  EXPECT_EQ(findings[0].text, "node-a: run dir /runs: 5.0 GiB free, below 10.0 GiB");
  EXPECT_TRUE(contains(findings[0].hint, "checkpoint.keep_last")) << findings[0].hint;
  EXPECT_EQ(findings[1].status, Status::Fail);
  EXPECT_EQ(findings[1].text, "node-b: run dir /runs: 0.5 GiB free");
  EXPECT_TRUE(contains(findings[1].hint, "a checkpoint that does not fit stops the run")) << findings[1].hint;
  EXPECT_EQ(findings[2].status, Status::Fail);
  EXPECT_EQ(findings[2].text, "node-c: run dir /ro: cannot write a file there: Read-only file system");
  for (const auto& f : findings) EXPECT_EQ(f.check, "disk");
}

TEST(DoctorChecks, MissingInterfaceOrName) {
  auto facts = healthy(3, 1);
  facts[1].network = {{}, {}};                              // node-b: no address, no interface
  facts[2].network = {{"127.0.1.1"}, {"eth0 198.18.0.3"}};  // node-c: its name is loopback
  const Findings findings = check_interfaces(facts, 3);
  ASSERT_EQ(findings.size(), 3u);
  EXPECT_EQ(findings[0].status, Status::Ok);
  EXPECT_EQ(findings[1].status, Status::Warn);
  EXPECT_EQ(findings[1].text, "node-b: resolves to nothing; interfaces none");
  EXPECT_TRUE(contains(findings[1].hint, "/etc/hosts")) << findings[1].hint;
  EXPECT_EQ(findings[2].status, Status::Warn);
  EXPECT_EQ(findings[2].text, "node-c: resolves to 127.0.1.1; interfaces eth0 198.18.0.3");

  // Several interfaces and none chosen.
  facts = healthy(2, 1);
  for (auto& f : facts) f.env.clear();
  facts[0].network.interfaces.push_back("docker0 172.17.0.1");
  const Findings warn = with_status(check_interfaces(facts, 2), Status::Warn);
  ASSERT_EQ(warn.size(), 1u);
  EXPECT_TRUE(contains(warn[0].text, "; no interface chosen (NCCL_SOCKET_IFNAME, OMPI_MCA_btl_tcp_if_include unset)"))
      << warn[0].text;
  EXPECT_TRUE(check_interfaces(facts, 1).empty());  // one node: traffic stays on the node
}

TEST(DoctorChecks, SelectedInterfaceMissingOnANodeFails) {
  // node-c's NIC is ens5 where the job names eth0 (a VM with another NIC type).
  auto facts = healthy(3, 1);
  for (auto& f : facts) f.env = {{"NCCL_SOCKET_IFNAME", "eth0"}, {"OMPI_MCA_btl_tcp_if_include", "198.18.0.0/24"}};
  facts[2].network.interfaces = {"ens5 198.18.0.3"};
  Findings fail = with_status(check_interfaces(facts, 3), Status::Fail);
  ASSERT_EQ(fail.size(), 1u);
  EXPECT_EQ(fail[0].text, "node-c: NCCL_SOCKET_IFNAME=eth0 selects none of its interfaces (ens5 198.18.0.3)");
  EXPECT_TRUE(contains(fail[0].hint, "common prefix")) << fail[0].hint;

  // Values that select an interface on every node: a prefix list, a common prefix, an exclusion.
  for (const std::string nccl : {"eth,ens", "e", "^docker,lo"}) {
    for (auto& f : facts) f.env["NCCL_SOCKET_IFNAME"] = nccl;
    EXPECT_TRUE(with_status(check_interfaces(facts, 3), Status::Fail).empty()) << nccl;
  }
  // ... and values that miss node-c's ens5: a prefix, an exact name, an exclusion of its prefix.
  for (const std::string nccl : {"eth", "=eth0", "^ens"}) {
    for (auto& f : facts) f.env["NCCL_SOCKET_IFNAME"] = nccl;
    fail = with_status(check_interfaces(facts, 3), Status::Fail);
    ASSERT_EQ(fail.size(), 1u) << nccl;
    EXPECT_TRUE(contains(fail[0].text, "node-c: NCCL_SOCKET_IFNAME=" + nccl + " selects none")) << fail[0].text;
  }
  for (auto& f : facts) f.env = {{"OMPI_MCA_btl_tcp_if_include", "198.18.1.0/24"}};
  fail = with_status(check_interfaces(facts, 3), Status::Fail);
  ASSERT_EQ(fail.size(), 3u);  // no node's address is in that subnet
  EXPECT_EQ(fail[0].text,
            "node-a: OMPI_MCA_btl_tcp_if_include=198.18.1.0/24 selects none of its interfaces (eth0 "
            "198.18.0.1)");
  for (auto& f : facts) f.env = {{"OMPI_MCA_btl_tcp_if_include", "198.18.0.0/16"}};
  EXPECT_TRUE(with_status(check_interfaces(facts, 3), Status::Fail).empty());
}

TEST(DoctorChecks, NodeThatCannotResolveAnotherFails) {
  auto facts = healthy(3, 1);
  facts[2].network.unresolved_peers = {"node-b (Name or service not known)"};
  const Findings findings = check_interfaces(facts, 3);
  const Findings fail = with_status(findings, Status::Fail);
  ASSERT_EQ(fail.size(), 1u);
  EXPECT_EQ(fail[0].text, "node-c: cannot resolve node-b (Name or service not known)");
  EXPECT_TRUE(contains(fail[0].hint, "/etc/hosts on node-c")) << fail[0].hint;
  EXPECT_EQ(with_status(findings, Status::Ok).size(), 2u);
}

TEST(DoctorChecks, DifferentDatasetNamesTheRanksAndFields) {
  auto facts = healthy(2, 2);
  for (int r : {2, 3}) facts[r].data->head = "fedcba9876543210", facts[r].data->bytes = 8192;
  const Findings findings = check_data(facts);
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].status, Status::Fail);
  EXPECT_TRUE(contains(findings[0].text, "ranks 2-3 (node-b) see a different dataset than ranks 0-1 (node-a): "))
      << findings[0].text;
  EXPECT_TRUE(contains(findings[0].text, "(differs in bytes, first MiB)")) << findings[0].text;

  facts[3].data->error = "not found";
  const Findings broken = check_data(facts);
  ASSERT_EQ(broken.size(), 1u);
  EXPECT_EQ(broken[0].text, "rank 3 (node-b): not found");
}

TEST(DoctorChecks, ManyHealthyNodesAreSummarised) {
  auto facts = healthy(10, 1);
  const Findings all_ok = check_memory(facts);
  ASSERT_EQ(all_ok.size(), 1u);
  EXPECT_EQ(all_ok[0].text, "10 more node(s) OK");
  facts[4].memory.available = 1 * kGiB;
  const Findings one_low = check_memory(facts);
  ASSERT_EQ(one_low.size(), 2u);
  EXPECT_EQ(one_low[0].status, Status::Warn);
  EXPECT_EQ(one_low[0].text, "node-e: 64.0 GiB total, 1.0 GiB available (1.0 GiB per rank), below 2.0 GiB per rank");
  EXPECT_EQ(one_low[1].text, "9 more node(s) OK");
}

TEST(DoctorChecks, GpusListWhichRankTookWhichDevice) {
  // Slurm --gpus-per-task=1: each rank sees one GPU of its own, cuda:0 (comm::choose_device).
  auto facts = healthy(1, 2);
  for (auto& f : facts) {
    f.device = "cuda:0";
    f.gpu.inventory.queryable = true;
    f.gpu.inventory.note.clear();
    f.gpu.inventory.driver_version = f.gpu.inventory.runtime_version = 13000;
    f.gpu.inventory.gpus = {{"NVIDIA H100 80GB HBM3", uint64_t(80 * kGiB), 9, 0}};
    f.env["CUDA_VISIBLE_DEVICES"] = std::to_string(2 + f.local_rank);
  }
  auto findings = check_gpus(facts);
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].status, Status::Ok) << findings[0].text;
  EXPECT_TRUE(contains(findings[0].text,
                       "2 rank(s): rank 0 cuda:0 (CUDA_VISIBLE_DEVICES=2), rank 1 cuda:0 (CUDA_VISIBLE_DEVICES=3)"))
      << findings[0].text;
  // mpirun, every GPU visible to every rank: local rank k on cuda:k, no variable.
  for (auto& f : facts) {
    f.env.erase("CUDA_VISIBLE_DEVICES");
    f.device = "cuda:" + std::to_string(f.local_rank);
    f.gpu.inventory.gpus.resize(2, f.gpu.inventory.gpus[0]);
  }
  findings = check_gpus(facts);
  EXPECT_TRUE(contains(findings[0].text, "2 x NVIDIA H100 80GB HBM3")) << findings[0].text;
  EXPECT_TRUE(contains(findings[0].text, "2 rank(s): rank 0 cuda:0, rank 1 cuda:1")) << findings[0].text;
}

}  // namespace
}  // namespace meridian::ops
