// `meridian doctor`'s judgement: each check turns facts (ops/facts.h) into findings, OK / WARN / FAIL
// with a message and, for WARN and FAIL, a hint (docs/troubleshooting.md explains each). No MPI: every
// function here is a pure function of its arguments, not collective, any thread, and throws nothing
// beyond std::bad_alloc. `facts` is every rank's, indexed by rank (as gather_facts returns them).
// Per-node checks give one finding per node (beyond 8 nodes the OK ones become one summary line);
// node_count is the number of nodes as MPI counts them (comm::Runtime::node_count).
#pragma once

#include <string>
#include <vector>

#include "meridian/ops/facts.h"

namespace meridian::ops {

enum class Status { Ok, Warn, Fail };

// "OK", "WARN", "FAIL"
const char* label(Status status);

struct Finding {
  Status status = Status::Ok;
  std::string check;  // "disk", "mpi", "p2p"
  std::string text;   // "node-a: run dir /runs: 3.2 GiB free, below 10.0 GiB"
  std::string hint;   // what to do; empty for OK
  int rank = -1;      // the rank it names, where it names one ("slow rank")
};
using Findings = std::vector<Finding>;

// "ranks 2-3 (node-b)": the ranks and the hosts they run on (each rank must index `facts`).
std::string who(const std::vector<RankFacts>& facts, const std::vector<int>& ranks);

// ---- Each node ("cores", "memory", "disk", "shm", "gpus").

// More ranks than cores, or every rank bound to one CPU on a node with cores to spare: WARN.
Findings check_cores(const std::vector<RankFacts>& facts);
// Who shares the node's CPUs (its first rank's CpuFacts): WARN for steal time >= 5 % (an overcommitted VM
// host), other processes keeping >= 0.5 cores busy (named, busiest first), or more runnable threads
// than cores; else OK with the readings. Nodes that share one machine (the same boot id: network
// namespaces, containers) are said in the OK line: their ranks share its cores.
Findings check_cpu(const std::vector<RankFacts>& facts);
// Available host memory per rank below 2 GiB, or /proc/meminfo unreadable: WARN.
Findings check_memory(const std::vector<RankFacts>& facts);
// The run directory (its worst rank per node): unusable or under 1 GiB free FAIL, under 10 GiB WARN.
Findings check_disk(const std::vector<RankFacts>& facts);
// /dev/shm under 1 GiB or unreadable: WARN.
Findings check_shm(const std::vector<RankFacts>& facts);
// GPUs: a driver older than the runtime FAIL; GPUs unused, idle or of mixed models WARN.
Findings check_gpus(const std::vector<RankFacts>& facts);
// This build against each node's GPU (comm/gpu_build.h): a driver older than the build's CUDA or a GPU
// whose compute capability it carries no kernels for FAIL, with the track or driver that fixes it.
Findings check_gpu_build(const std::vector<RankFacts>& facts);

// ---- Consistency across ranks.

// The same build, LibTorch, MPI, NCCL, CUDA on every rank (FAIL otherwise); the same binary, NVIDIA
// driver and GPU model (WARN otherwise; driver and GPU model only when some rank has them).
Findings check_versions(const std::vector<RankFacts>& facts);
// Fewer distinct host names than nodes: WARN ("hostnames"); nothing when they match.
Findings check_hostnames(const std::vector<RankFacts>& facts, int node_count);
// Every rank sees the file rank 0 wrote in the run directory (FAIL naming those that do not).
Findings check_shared_dir(const std::vector<RankFacts>& facts, int node_count);
// Rank 0's relevant variables (OK), then a WARN per variable whose value differs between ranks
// (CUDA_VISIBLE_DEVICES excepted: launchers set it per rank).
Findings check_environment(const std::vector<RankFacts>& facts);
// With node_count > 1, per node: FAIL when it cannot resolve another node's name, or when an interface
// selection it runs with (NCCL_SOCKET_IFNAME, OMPI_MCA_btl_tcp_if_include, OMPI_MCA_oob_tcp_if_include)
// picks none of its interfaces; WARN when its own name resolves to nothing or to loopback, or when it has
// several interfaces and none is chosen. Nothing on one node.
Findings check_interfaces(const std::vector<RankFacts>& facts, int node_count);
// The dataset: FAIL per group of ranks that cannot read it, else FAIL per group that sees another file
// than rank 0 (what differs named), else one OK. Every rank's `data` must be set.
Findings check_data(const std::vector<RankFacts>& facts);

// ---- Network (measurements from ops/network_check.h).

// One "p2p" line per measured pair (a WARN for a pair slower than the median of all pairs: bandwidth
// below a third, or latency above three times and 50 us above it; beyond 16 pairs the OK ones become a
// summary line), then a "slow rank" WARN for each rank whose links are slow compared with the links
// between the others. between_nodes chooses the hints (network vs shared memory). No pair: one OK.
// evidence BandwidthOnly ignores latency: health's probes run beside training, where a rank whose core
// is busy (a loader thread, another job) answers a ping-pong late through no fault of its link.
enum class LinkEvidence { LatencyOrBandwidth, BandwidthOnly };
Findings check_links(const std::vector<RankFacts>& facts, const std::vector<LinkFacts>& links, bool between_nodes,
                     LinkEvidence evidence = LinkEvidence::LatencyOrBandwidth);
// The allreduce: FAIL when it returned wrong sums; one OK line when ranks == 1 (nothing measured).
Findings check_allreduce(const AllreduceFacts& allreduce);
// Clock offsets to rank 0 (indexed by rank): WARN naming the ranks off by more than 100 ms. Nothing
// for fewer than 2 offsets.
Findings check_clocks(const std::vector<RankFacts>& facts, const std::vector<comm::ClockOffset>& offsets);

}  // namespace meridian::ops
