// The doctor's checks of each node (cores, cpu sharing, memory, disk, /dev/shm, GPUs), and the wording they share.
#include "meridian/ops/checks.h"

#include <arpa/inet.h>
#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <sstream>

#include "checks_common.h"
#include "meridian/core/cpu_usage.h"
#include "meridian/core/stats.h"

namespace meridian::ops {

using namespace detail;

const char* label(Status s) { return s == Status::Ok ? "OK" : s == Status::Warn ? "WARN" : "FAIL"; }

std::string who(const Facts& facts, const std::vector<int>& ranks) {
  std::vector<std::string> hosts;
  for (int r : ranks)
    if (std::find(hosts.begin(), hosts.end(), facts[r].host) == hosts.end()) hosts.push_back(facts[r].host);
  return ranks_text(ranks) + " (" + joined(hosts) + ")";
}

// ---- Each node.

Findings check_cores(const Facts& facts) {
  return per_node(facts, "cores", [&](const Node& node, const RankFacts& first) -> Finding {
    const int n = static_cast<int>(node.ranks.size()), c = first.cores;
    const std::string head = fmt::format("{}: {} cores, {} rank(s) ({})", node.host, c, n, ranges(node.ranks));
    bool all_single = true;
    for (int r : node.ranks) all_single = all_single && facts[r].bound_cpus == 1;
    const std::string detail =
        fmt::format("{}, bound CPUs {}, threads {}", head, per_rank_list(facts, node.ranks, &RankFacts::bound_cpus),
                    per_rank_list(facts, node.ranks, &RankFacts::threads));
    // The job's ranks on this node's machine (the same kernel boot id): nodes of a virtual cluster,
    // or VMs of one host that see it, share its cores.
    int on_machine = 0;
    for (const auto& f : facts) on_machine += !first.cpu.machine.empty() && f.cpu.machine == first.cpu.machine;
    if (on_machine > n && on_machine > c)
      return {Status::Warn, "",
              fmt::format("{}: oversubscribed: {} ranks of the job on this machine's {} cores (other nodes share it)",
                          detail, on_machine, c) +
                  (first.mpi_waits.empty() ? "" : "; " + first.mpi_waits),
              "every rank waiting in MPI would spin on a core another rank computes on: meridian makes MPI's waits "
              "yield there (checkpoints, data reads); for speed, start at most one rank per core"};
    if (n > c)
      return {Status::Warn, "",
              detail + ": more ranks than cores" + (first.mpi_waits.empty() ? "" : "; " + first.mpi_waits),
              "start at most one rank per core (one per GPU on GPU nodes); expected on a small test machine"};
    if (all_single && c >= 2 * n)
      return {Status::Warn, "", detail + ": each rank runs on 1 CPU while the node has " + std::to_string(c),
              "mpirun binds each rank to one core when it starts 2 ranks or fewer: add --bind-to none or "
              "--map-by socket:PE=<cores per rank>"};
    return {Status::Ok, "", detail, ""};
  });
}

Findings check_cpu(const Facts& facts) {
  return per_node(facts, "cpu", [&](const Node& node, const RankFacts& first) -> Finding {
    const CpuFacts& c = first.cpu;
    std::vector<std::string> sharing;  // the other nodes on this one's machine
    for (const auto& other : nodes_of(facts))
      if (other.host != node.host && facts[other.ranks.front()].cpu.machine == c.machine && !c.machine.empty())
        sharing.push_back(other.host);
    const std::string text = fmt::format(
        "{}: {} cores; over {} s: {:.0f} % steal, {:.1f} runnable threads, other processes {:.1f} cores busy{}",
        node.host, first.cores, kCpuWindowS, c.steal_pct, c.runnable, c.others_cores,
        sharing.empty() ? ""
                        : "; one machine with " + joined(sharing) +
                              " (the same kernel boot id): "
                              "their ranks share its cores");
    if (c.steal_pct >= core::kSharedStealPct)
      return {Status::Warn, "", text + ": CPU shared: the hypervisor ran other VMs on this VM's vCPUs",
              "the VM host is overcommitted: reserve the VM's CPUs (VMware: CPU reservation, latency sensitivity "
              "high) or give it fewer vCPUs; every step waits for the slowest rank"};
    if (c.others_cores >= core::kSharedOthersCores)
      return {Status::Warn, "", text + ": CPU shared with " + (c.others.empty() ? "other processes" : joined(c.others)),
              "another job or process uses this node's cores and every step waits for the slowest rank: stop it, or "
              "start fewer ranks or threads here (meridian leaves the cores it sees busy at start to it)"};
    if (c.runnable > first.cores + core::kSharedRunnableExcess)
      return {Status::Warn, "",
              fmt::format("{}: CPU shared: {:.1f} runnable threads on {} cores", text, c.runnable, first.cores),
              "more threads want to run than there are cores: find them with top -H"};
    return {Status::Ok, "", text, ""};
  });
}

Findings check_memory(const Facts& facts) {
  return per_node(facts, "memory", [](const Node& node, const RankFacts& first) -> Finding {
    const double total = first.memory.total, avail = first.memory.available;
    const int n = static_cast<int>(node.ranks.size());
    if (total < 0 || avail < 0)
      return {Status::Warn, "", node.host + ": /proc/meminfo unreadable", "a Linux node has /proc/meminfo"};
    const std::string text =
        fmt::format("{}: {} total, {} available ({} per rank)", node.host, gib(total), gib(avail), gib(avail / n));
    if (avail / n < kMemWarnPerRank)
      return {Status::Warn, "", text + ", below " + gib(kMemWarnPerRank) + " per rank",
              "other processes hold the memory (top, nvidia-smi) or start fewer ranks on this node"};
    return {Status::Ok, "", text, ""};
  });
}

Findings check_disk(const Facts& facts) {
  return per_node(facts, "disk", [&](const Node& node, const RankFacts& first) -> Finding {
    // The worst rank on the node speaks for it.
    const RunDirFacts* worst = &first.run_dir;
    for (int r : node.ranks) {
      const RunDirFacts& d = facts[r].run_dir;
      if (!d.error.empty() || (worst->error.empty() && d.free < worst->free)) worst = &d;
    }
    if (!worst->error.empty())
      return {Status::Fail, "", fmt::format("{}: run dir {}: {}", node.host, worst->path, worst->error),
              "checkpoints and logs go to the run directory: pass a writable --run-dir (the same as for train)"};
    const std::string text = fmt::format("{}: run dir {}: {} free", node.host, worst->path, gib(worst->free));
    if (worst->free < kDiskFailBytes)
      return {Status::Fail, "", text,
              "free space on that file system or choose another --run-dir: a checkpoint that does not fit stops the "
              "run"};
    if (worst->free < kDiskWarnBytes)
      return {Status::Warn, "", text + ", below " + gib(kDiskWarnBytes),
              "checkpoints of a large model need tens of GiB: free space, lower checkpoint.keep_last, or choose "
              "another --run-dir"};
    return {Status::Ok, "", text, ""};
  });
}

Findings check_shm(const Facts& facts) {
  return per_node(facts, "shm", [](const Node& node, const RankFacts& first) -> Finding {
    const ShmFacts& s = first.shm;
    const std::string hint =
        "NCCL and Open MPI's shared-memory transport keep intra-node buffers in /dev/shm: docker run --shm-size=8g, "
        "or mount -o remount,size=8G /dev/shm";
    if (!s.error.empty()) return {Status::Warn, "", node.host + ": " + s.error, hint};
    const std::string text = fmt::format("{}: /dev/shm {} ({} free)", node.host, gib(s.total), gib(s.free));
    if (s.total < kShmWarnBytes) return {Status::Warn, "", text + ", below " + gib(kShmWarnBytes), hint};
    return {Status::Ok, "", text, ""};
  });
}

Findings check_gpu_build(const Facts& facts) {
  return per_node(facts, "gpu build", [&](const Node& node, const RankFacts& first) -> Finding {
    for (int r : node.ranks)
      if (facts[r].gpu.build_refused)
        return {Status::Fail, "", fmt::format("rank {}: {}", r, facts[r].gpu.build),
                "install the track the node runs (jobs/setup-node.sh chooses it; docs/running.md, \"GPUs, drivers "
                "and tracks\")"};
    return {Status::Ok, "",
            node.host + ": " + (first.gpu.build.empty() ? "not checked (--device cpu)" : first.gpu.build), ""};
  });
}

Findings check_gpus(const Facts& facts) {
  return per_node(facts, "gpus", [&](const Node& node, const RankFacts& first) -> Finding {
    const comm::GpuInventory& g = first.gpu.inventory;
    const int n = static_cast<int>(node.ranks.size()), count = static_cast<int>(g.gpus.size());
    const bool on_cpu =
        std::any_of(node.ranks.begin(), node.ranks.end(), [&](int r) { return facts[r].device == "cpu"; });
    const std::string versions =
        fmt::format("driver {}(CUDA {}), runtime {}", first.gpu.driver_release + " ",
                    comm::cuda_version_text(g.driver_version), comm::cuda_version_text(g.runtime_version));
    if (!g.queryable) return {Status::Ok, "", node.host + ": none queried (" + g.note + "); ranks on cpu", ""};
    if (count == 0) {
      if (g.driver_version > 0 && g.runtime_version > g.driver_version)
        return {Status::Fail, "", fmt::format("{}: no usable GPU: {}; {}", node.host, g.note, versions),
                "the NVIDIA driver is older than the CUDA runtime meridian was built with: update the driver "
                "(nvidia-smi shows the CUDA version it supports) or install the track it runs (jobs/setup-node.sh "
                "--print-track; docs/running.md, \"GPUs, drivers and tracks\")"};
      return {Status::Ok, "", fmt::format("{}: no GPU ({}); ranks on cpu", node.host, g.note), ""};
    }
    std::map<std::string, int> models;
    for (const auto& d : g.gpus)
      models[fmt::format("{} ({}, cc {}.{})", d.name, gib(double(d.memory_bytes)), d.major, d.minor)]++;
    std::vector<std::string> list;
    for (const auto& [m, k] : models) list.push_back(std::to_string(k) + " x " + m);
    // Which rank took which device (comm::choose_device), with the variable that decided it.
    std::vector<std::string> mapping;
    for (int r : node.ranks) {
      const auto env = facts[r].env.find("CUDA_VISIBLE_DEVICES");
      mapping.push_back(fmt::format("rank {} {}{}", r, facts[r].device,
                                    env == facts[r].env.end() ? "" : " (CUDA_VISIBLE_DEVICES=" + env->second + ")"));
    }
    const std::string text =
        fmt::format("{}: {}; {}; {} rank(s): {}", node.host, joined(list), versions, n, joined(mapping));
    if (on_cpu)
      return {Status::Warn, "", text + " run on cpu",
              "GPUs are visible but unused: a CPU-only LibTorch cannot use them (build against a CUDA LibTorch, "
              "-DCMAKE_PREFIX_PATH=<libtorch>), or --device cpu was given"};
    if (count > n)
      return {Status::Warn, "", text + fmt::format(" for {} GPUs: {} idle", count, count - n),
              "start one rank per GPU (mpirun -npernode <GPUs>, Slurm --ntasks-per-node=<GPUs>)"};
    if (models.size() > 1)
      return {Status::Warn, "", text + ": mixed models on one node",
              "data parallelism runs at the slowest GPU's pace; restrict CUDA_VISIBLE_DEVICES to one model"};
    return {Status::Ok, "", text, ""};
  });
}

}  // namespace meridian::ops
