#include "meridian/ops/checks.h"

#include <arpa/inet.h>
#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <sstream>

#include "meridian/core/stats.h"

namespace meridian::ops {

namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;
constexpr double kShmWarnBytes = 1 * kGiB;   // NCCL and Open MPI put intra-node buffers in /dev/shm
constexpr double kDiskFailBytes = 1 * kGiB;  // not even one checkpoint of a small model
constexpr double kDiskWarnBytes = 10 * kGiB;
constexpr double kMemWarnPerRank = 2 * kGiB;  // host memory available per rank on a node
constexpr double kSlowFactor = 3;             // a link (or rank) below 1/3 of the median is slow
constexpr double kLatencyFloorUs = 50;        // ...and latency above 3x the median only when also 50 us above it
constexpr double kClockWarnS = 0.1;
constexpr size_t kMaxNodeLines = 8;  // per-node checks: beyond this, OK nodes are summarised

using Facts = std::vector<RankFacts>;

// "all 4 ranks", "the only rank"
std::string all_ranks(size_t n) { return n == 1 ? "the only rank" : fmt::format("all {} ranks", n); }

std::string gib(double bytes) { return fmt::format("{:.1f} GiB", bytes / kGiB); }
// A link's bandwidth: GB/s, or MB/s below 0.1 GB/s (a throttled link would read "0.00 GB/s").
std::string rate(double gbs) {
  return gbs >= 0.1 ? fmt::format("{:.2f} GB/s", gbs) : fmt::format("{:.1f} MB/s", gbs * 1e3);
}

// "0-2,5"
std::string ranges(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::string s;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i > 0) s += ",";
    s += j > i ? fmt::format("{}-{}", ranks[i], ranks[j]) : std::to_string(ranks[i]);
    i = j + 1;
  }
  return s;
}

// "rank 3", "ranks 0-2,5"
std::string ranks_text(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + ranges(ranks);
}

// "a, b, c"
std::string joined(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& item : items) s += (s.empty() ? "" : ", ") + item;
  return s;
}

// Ranks grouped by value, in order of first appearance (so rank 0's group comes first).
std::vector<std::pair<std::string, std::vector<int>>> group_by(const std::vector<std::string>& values) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (int r = 0; r < static_cast<int>(values.size()); ++r) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == values[r]; });
    if (it == groups.end())
      groups.push_back({values[r], {r}});
    else
      it->second.push_back(r);
  }
  return groups;
}

struct Node {
  std::string host;
  std::vector<int> ranks;
};

std::vector<Node> nodes_of(const Facts& facts) {
  std::vector<Node> nodes;
  for (const auto& f : facts) {
    auto it = std::find_if(nodes.begin(), nodes.end(), [&](const Node& n) { return n.host == f.host; });
    if (it == nodes.end())
      nodes.push_back({f.host, {f.rank}});
    else
      it->ranks.push_back(f.rank);
  }
  return nodes;
}

// `judge` gives each node's finding (for check `check`); beyond kMaxNodeLines nodes the OK ones become
// one summary line.
Findings per_node(const Facts& facts, const std::string& check,
                  const std::function<Finding(const Node&, const RankFacts& first)>& judge) {
  Findings findings;
  size_t ok = 0;
  for (const auto& node : nodes_of(facts)) {
    findings.push_back(judge(node, facts[node.ranks.front()]));
    findings.back().check = check;
    ok += findings.back().status == Status::Ok;
  }
  if (findings.size() <= kMaxNodeLines || ok == 0) return findings;
  findings.erase(
      std::remove_if(findings.begin(), findings.end(), [](const Finding& f) { return f.status == Status::Ok; }),
      findings.end());
  findings.push_back({Status::Ok, check, fmt::format("{} more node(s) OK", ok), ""});
  return findings;
}

// "2 each" when all ranks have the same value, else "2,2,1,2".
std::string per_rank_list(const Facts& facts, const std::vector<int>& ranks, int RankFacts::*field) {
  std::vector<std::string> v;
  for (int r : ranks) v.push_back(std::to_string(facts[r].*field));
  if (std::all_of(v.begin(), v.end(), [&](const std::string& x) { return x == v[0]; })) return v[0] + " each";
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + v[i];
  return s;
}

// Same value on every rank (one OK line), or `on_mismatch` naming every group that differs from rank 0's.
Finding compare(const Facts& facts, const std::string& check, Status on_mismatch,
                const std::function<std::string(const RankFacts&)>& value, const std::string& hint) {
  std::vector<std::string> values;
  for (const auto& f : facts) values.push_back(value(f));
  const auto groups = group_by(values);
  if (groups.size() == 1) return {Status::Ok, check, groups[0].first + " on " + all_ranks(facts.size()), ""};
  std::string text = "differs: ";
  for (size_t i = 0; i < groups.size(); ++i)
    text += fmt::format("{}{} has {}", i ? "; " : "", who(facts, groups[i].second), groups[i].first);
  return {on_mismatch, check, text, hint};
}

// Slow compared with a reference: bandwidth below 1/kSlowFactor of it, or latency above kSlowFactor times
// it (and kLatencyFloorUs more, so that microsecond jitter between ranks of one node is no finding).
bool slower(double bw, double lat_us, double ref_bw, double ref_lat_us, LinkEvidence evidence) {
  if (bw * kSlowFactor < ref_bw) return true;
  return evidence == LinkEvidence::LatencyOrBandwidth &&
         lat_us > std::max(kSlowFactor * ref_lat_us, ref_lat_us + kLatencyFloorUs);
}

}  // namespace

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
    if (n > c)
      return {Status::Warn, "", detail + ": more ranks than cores",
              "start at most one rank per core (one per GPU on GPU nodes); expected on a small test machine"};
    if (all_single && c >= 2 * n)
      return {Status::Warn, "", detail + ": each rank runs on 1 CPU while the node has " + std::to_string(c),
              "mpirun binds each rank to one core when it starts 2 ranks or fewer: add --bind-to none or "
              "--map-by socket:PE=<cores per rank>"};
    return {Status::Ok, "", detail, ""};
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
                "(nvidia-smi shows the CUDA version it supports) or build with a matching CUDA"};
      return {Status::Ok, "", fmt::format("{}: no GPU ({}); ranks on cpu", node.host, g.note), ""};
    }
    std::map<std::string, int> models;
    for (const auto& d : g.gpus)
      models[fmt::format("{} ({}, cc {}.{})", d.name, gib(double(d.memory_bytes)), d.major, d.minor)]++;
    std::vector<std::string> list;
    for (const auto& [m, k] : models) list.push_back(std::to_string(k) + " x " + m);
    const std::string text = fmt::format("{}: {}; {}; {} rank(s)", node.host, joined(list), versions, n);
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

// ---- Consistency across ranks.

Findings check_versions(const Facts& facts) {
  const std::string rebuild =
      "every node must run the same meridian build: share one build directory (NFS) or "
      "install the same packages and build the same commit on every node";
  Findings findings{
      compare(
          facts, "build", Status::Fail, [](const RankFacts& f) { return f.versions.build; }, rebuild),
      compare(
          facts, "binary", Status::Warn, [](const RankFacts& f) { return "fnv " + f.versions.binary; },
          "the meridian binaries differ: fine when each node built the same commit itself, else copy one build"),
      compare(
          facts, "libtorch", Status::Fail, [](const RankFacts& f) { return f.versions.torch; }, rebuild),
      compare(
          facts, "mpi", Status::Fail, [](const RankFacts& f) { return f.versions.mpi; },
          "every node must have the same Open MPI (jobs/setup-node.sh installs Debian's on each node)"),
      compare(
          facts, "nccl", Status::Fail, [](const RankFacts& f) { return f.versions.nccl; },
          "mismatched NCCL versions can hang or corrupt collectives: install the same NCCL on every node"),
      compare(
          facts, "cuda", Status::Fail,
          [](const RankFacts& f) {
            return f.versions.cuda_build + ", runtime " + comm::cuda_version_text(f.gpu.inventory.runtime_version);
          },
          "the same CUDA toolkit and runtime on every node (the same build, the same LibTorch)")};
  const bool queryable =
      std::any_of(facts.begin(), facts.end(), [](const RankFacts& f) { return f.gpu.inventory.queryable; });
  if (queryable)
    findings.push_back(compare(
        facts, "driver", Status::Warn,
        [](const RankFacts& f) {
          const int v = f.gpu.inventory.driver_version;
          const std::string& release = f.gpu.driver_release;
          if (v <= 0 && release.empty()) return std::string("no NVIDIA driver");
          return (release.empty() ? "" : release + ", ") + "supports CUDA " + comm::cuda_version_text(v);
        },
        "NVIDIA drivers differ between nodes: install the same driver version everywhere"));
  const bool any_gpu =
      std::any_of(facts.begin(), facts.end(), [](const RankFacts& f) { return !f.gpu.inventory.gpus.empty(); });
  if (any_gpu)
    findings.push_back(compare(
        facts, "gpu model", Status::Warn,
        [](const RankFacts& f) {
          const auto& g = f.gpu.inventory.gpus;
          return g.empty() ? std::string("no GPU") : g[0].name;
        },
        "data parallelism runs at the slowest GPU's pace: use one GPU model for the job"));
  return findings;
}

Findings check_hostnames(const Facts& facts, int node_count) {
  // Open MPI counts nodes by shared memory; two nodes with one name confuse hostfiles and logs.
  const size_t names = nodes_of(facts).size();
  if (static_cast<int>(names) == node_count) return {};
  return {{Status::Warn, "hostnames", fmt::format("{} node(s) but {} distinct host name(s)", node_count, names),
           "give every node a unique name (hostnamectl set-hostname) and list each in /etc/hosts"}};
}

Findings check_shared_dir(const Facts& facts, int node_count) {
  // The run directory must be one directory seen by every node: checkpoints are one file written by all ranks.
  std::vector<int> blind;
  for (const auto& f : facts)
    if (!f.run_dir.sees_rank0_file) blind.push_back(f.rank);
  const RunDirFacts& dir = facts[0].run_dir;
  if (!dir.error.empty())
    return {{Status::Warn, "shared dir", dir.path + ": not checked, rank 0 cannot write there (see disk)",
             "make the run directory writable or pass another --run-dir, then run doctor again"}};
  if (blind.empty())
    return {{Status::Ok, "shared dir",
             fmt::format("{}: every rank sees rank 0's file there{}", dir.path, node_count > 1 ? "" : " (one node)"),
             ""}};
  return {{Status::Fail, "shared dir",
           fmt::format("{}: {} do not see the file rank 0 wrote there", dir.path, who(facts, blind)),
           "checkpoints are one file written by all ranks and metrics go to one run directory: put --run-dir on "
           "storage that every node mounts at the same path (NFS) and pass the same --run-dir to train"}};
}

Findings check_environment(const Facts& facts) {
  std::string listed;
  for (const auto& [k, v] : facts[0].env) listed += (listed.empty() ? "" : " ") + k + "=" + v;
  Findings findings{
      {Status::Ok, "environment",
       listed.empty() ? "rank 0: no NCCL_*, UCX_*, OMPI_MCA_*, MERIDIAN_* variables set" : "rank 0: " + listed, ""}};
  std::set<std::string> names;
  for (const auto& f : facts)
    for (const auto& [k, v] : f.env) names.insert(k);
  names.erase("CUDA_VISIBLE_DEVICES");  // launchers set it per rank on purpose
  for (const auto& name : names) {
    std::vector<std::string> values;
    for (const auto& f : facts) values.push_back(f.env.count(name) ? "'" + f.env.at(name) + "'" : "unset");
    const auto groups = group_by(values);
    if (groups.size() == 1) continue;
    std::string text = name + " differs: ";
    for (size_t i = 0; i < groups.size(); ++i)
      text += fmt::format("{}{} {}", i ? "; " : "", who(facts, groups[i].second), groups[i].first);
    findings.push_back({Status::Warn, "environment", text,
                        "mpirun passes variables to other nodes only with -x NAME (Slurm: --export): set them for "
                        "every rank in the job script"});
  }
  return findings;
}

// Does a selection variable's value pick `iface` ("eth0 198.18.0.1")? NCCL_SOCKET_IFNAME: a comma list of
// name prefixes ("=name": exact; a leading "^": all but those); Open MPI's *_if_include: names or
// subnets in CIDR form.
bool selects(const std::string& variable, const std::string& value, const std::string& iface) {
  const std::string name = iface.substr(0, iface.find(' ')), address = iface.substr(iface.find(' ') + 1);
  const bool nccl = variable == "NCCL_SOCKET_IFNAME";
  const bool exclude = nccl && !value.empty() && value[0] == '^';
  std::stringstream items(exclude ? value.substr(1) : value);
  bool any = false;
  for (std::string item; std::getline(items, item, ',');) {
    if (nccl) {
      any |= item.rfind('=', 0) == 0 ? name == item.substr(1) : name.rfind(item, 0) == 0;
    } else if (const auto slash = item.find('/'); slash != std::string::npos) {
      in_addr net{}, ip{};
      const int bits = std::atoi(item.c_str() + slash + 1);
      if (inet_pton(AF_INET, item.substr(0, slash).c_str(), &net) != 1 || inet_pton(AF_INET, address.c_str(), &ip) != 1)
        continue;
      const uint32_t mask = bits <= 0 ? 0 : bits >= 32 ? ~0u : ~0u << (32 - bits);
      any |= (ntohl(net.s_addr) & mask) == (ntohl(ip.s_addr) & mask);
    } else {
      any |= name == item;
    }
  }
  return exclude ? !any : any;
}

Findings check_interfaces(const Facts& facts, int node_count) {
  // Interfaces and name resolution matter once traffic leaves the node.
  if (node_count <= 1) return {};
  const std::vector<std::string> selectors{"NCCL_SOCKET_IFNAME", "OMPI_MCA_btl_tcp_if_include",
                                           "OMPI_MCA_oob_tcp_if_include"};
  return per_node(facts, "interfaces", [&](const Node& node, const RankFacts& first) -> Finding {
    const NetworkFacts& n = first.network;
    const std::string addrs = joined(n.resolves_to), ifs = joined(n.interfaces);
    const std::string text = fmt::format("{}: resolves to {}; interfaces {}", node.host,
                                         addrs.empty() ? "nothing" : addrs, ifs.empty() ? "none" : ifs);
    if (!n.unresolved_peers.empty())
      return {Status::Fail, "", fmt::format("{}: cannot resolve {}", node.host, joined(n.unresolved_peers)),
              fmt::format("list every node's name with its cluster address in /etc/hosts on {} (or fix its DNS): "
                          "hostfiles, Open MPI's launcher and Slurm reach nodes by name",
                          node.host)};
    // (No interface listed: the facts could not be read; the warning below says so.)
    std::vector<std::string> unmatched;
    for (const auto& variable : selectors) {
      const auto it = first.env.find(variable);
      if (it == first.env.end() || n.interfaces.empty()) continue;
      if (std::none_of(n.interfaces.begin(), n.interfaces.end(),
                       [&](const std::string& i) { return selects(variable, it->second, i); }))
        unmatched.push_back(variable + "=" + it->second);
    }
    if (!unmatched.empty())
      return {Status::Fail, "",
              fmt::format("{}: {} select{} none of its interfaces ({})", node.host, joined(unmatched),
                          unmatched.size() == 1 ? "s" : "", ifs),
              fmt::format("the job selects interfaces that {} does not have: its ranks cannot reach the others. "
                          "Name an interface every node has, or, when the names differ between nodes, give NCCL "
                          "their common prefix (NCCL_SOCKET_IFNAME=ens) and Open MPI the subnet "
                          "(OMPI_MCA_btl_tcp_if_include=10.1.0.0/24; jobs/env/vm-tcp.sh: MERIDIAN_MPI_IFACE)",
                          node.host)};
    const bool loopback = std::any_of(n.resolves_to.begin(), n.resolves_to.end(),
                                      [](const std::string& a) { return a.rfind("127.", 0) == 0; });
    if (addrs.empty() || loopback)
      return {Status::Warn, "", text,
              "map every node's name to its cluster address in /etc/hosts on every node (Debian maps its own "
              "name to 127.0.1.1), or set up DNS"};
    const bool chosen =
        std::any_of(selectors.begin(), selectors.end(), [&](const std::string& v) { return first.env.count(v) > 0; }) ||
        first.env.count("OMPI_MCA_btl_tcp_if_exclude");
    if (n.interfaces.size() > 1 && !chosen)
      return {Status::Warn, "", text + "; no interface chosen (NCCL_SOCKET_IFNAME, OMPI_MCA_btl_tcp_if_include unset)",
              "with several interfaces (docker0, virbr0) NCCL and Open MPI may pick one the other nodes cannot "
              "reach: set NCCL_SOCKET_IFNAME=<if> and OMPI_MCA_btl_tcp_if_include=<if> (docs/troubleshooting.md)"};
    return {Status::Ok, "", text, ""};
  });
}

Findings check_data(const Facts& facts) {
  const std::string hint =
      "every rank must read the same dataset: a data path that points elsewhere on one node, or not the same NFS "
      "export (compare mount; ls -l the path on each node)";
  Findings findings;
  std::vector<std::string> errors;
  for (const auto& f : facts) errors.push_back(f.data->error);
  for (const auto& [error, ranks] : group_by(errors))
    if (!error.empty())
      findings.push_back({Status::Fail, "data", fmt::format("{}: {}", who(facts, ranks), error), hint});
  if (!findings.empty()) return findings;

  // The fingerprint's fields, by name ("first MiB": the hash of the file's head).
  using Field = std::pair<const char*, std::function<std::string(const DataFacts&)>>;
  const std::vector<Field> fields{
      {"kind", [](const DataFacts& d) { return d.kind; }},
      {"count", [](const DataFacts& d) { return std::to_string(d.count); }},
      {"format_version", [](const DataFacts& d) { return std::to_string(d.format_version); }},
      {"split", [](const DataFacts& d) { return d.split; }},
      {"created_by", [](const DataFacts& d) { return d.created_by; }},
      {"bytes", [](const DataFacts& d) { return std::to_string(d.bytes); }},
      {"first MiB", [](const DataFacts& d) { return d.head; }}};
  std::vector<std::string> prints;
  for (const auto& f : facts) {
    std::string p;
    for (const auto& [name, value] : fields) p += value(*f.data) + '\0';
    prints.push_back(p);
  }
  const auto groups = group_by(prints);
  const auto describe = [](const DataFacts& d) {
    return fmt::format("{}: {} {} sample(s), {} bytes, first MiB fnv {}", d.path, d.kind, d.count, d.bytes, d.head);
  };
  if (groups.size() == 1)
    return {{Status::Ok, "data", describe(*facts[0].data) + " on " + all_ranks(facts.size()), ""}};
  const DataFacts& ref = *facts[0].data;
  for (size_t i = 1; i < groups.size(); ++i) {
    const DataFacts& d = *facts[groups[i].second.front()].data;
    std::vector<std::string> differ;
    for (const auto& [name, value] : fields)
      if (value(d) != value(ref)) differ.push_back(name);
    findings.push_back(
        {Status::Fail, "data",
         fmt::format("{} see a different dataset than {}: {} vs {} (differs in {})", who(facts, groups[i].second),
                     who(facts, groups[0].second), describe(d), describe(ref), joined(differ)),
         hint});
  }
  return findings;
}

// ---- Network.

Findings check_links(const Facts& facts, const std::vector<LinkFacts>& links, bool between_nodes,
                     LinkEvidence evidence) {
  if (links.empty()) return {{Status::Ok, "p2p", "one rank: no pair to measure", ""}};
  const auto name = [&](int r) { return fmt::format("{} r{}", facts[r].host, r); };
  std::vector<double> bws, lats;
  for (const auto& l : links) bws.push_back(l.bandwidth.bandwidth_gbs), lats.push_back(l.latency.one_way_us);
  const double med = median(bws), med_lat = median(lats);
  // Between nodes a pair is a network path; within one node it is shared memory, slow only when a CPU is.
  const std::string slow_hint =
      between_nodes ? "a slow link slows every step of the job: check the NIC's speed and errors (ethtool, ip -s "
                      "link), MTU, the switch port, a VM's virtual NIC type (virtio/vmxnet3) and other traffic; rerun "
                      "to rule out noise"
                    : "ranks of one node talk through shared memory: a slow pair means a busy or throttled CPU "
                      "(another process, more ranks than cores, CPU quota); rerun to rule out noise";
  const std::string slow_rank_hint =
      between_nodes ? "every link of this node is slow: its NIC or driver, or a busy host (another job, a VM host "
                      "that is oversubscribed); fix the node or leave it out of the hostfile before training"
                    : "every pair with this rank is slow: its core is busy with another process or throttled "
                      "(top, mpirun --report-bindings); every step waits for the slowest rank";
  Findings lines;
  for (const auto& l : links) {
    const std::string text = fmt::format("{} <-> {}: latency {:.1f} us, bandwidth {} ({} MiB messages)",
                                         name(l.bandwidth.a), name(l.bandwidth.b), l.latency.one_way_us,
                                         rate(l.bandwidth.bandwidth_gbs), l.bandwidth.bytes >> 20);
    if (links.size() > 1 && slower(l.bandwidth.bandwidth_gbs, l.latency.one_way_us, med, med_lat, evidence))
      lines.push_back({Status::Warn, "p2p",
                       text + fmt::format(": slow link (median of all pairs: {:.1f} us, {})", med_lat, rate(med)),
                       slow_hint});
    else
      lines.push_back({Status::Ok, "p2p", text, ""});
  }
  Findings findings;
  for (const auto& l : lines)
    if (l.status != Status::Ok || lines.size() <= 2 * kMaxNodeLines) findings.push_back(l);
  if (findings.size() < lines.size())
    findings.push_back(
        {Status::Ok, "p2p",
         fmt::format("{} more pair(s) OK; median {:.2f} GB/s, min {:.2f}, max {:.2f}", lines.size() - findings.size(),
                     med, *std::min_element(bws.begin(), bws.end()), *std::max_element(bws.begin(), bws.end())),
         ""});

  // A slow rank or node shows as all its links slow: compare each endpoint's links with the links between the others.
  std::set<int> endpoints;
  for (const auto& l : links) endpoints.insert(l.bandwidth.a), endpoints.insert(l.bandwidth.b);
  for (int e : endpoints) {
    std::vector<double> mine, others, mine_lat, others_lat;
    for (const auto& l : links) {
      const bool in = l.bandwidth.a == e || l.bandwidth.b == e;
      (in ? mine : others).push_back(l.bandwidth.bandwidth_gbs);
      (in ? mine_lat : others_lat).push_back(l.latency.one_way_us);
    }
    if (mine.empty() || others.empty()) continue;
    // Its best link against the others' median: every link of the node must be slow (with 3 nodes a
    // median of its 2 links would mix the slow one of a neighbour into it).
    const double m = *std::max_element(mine.begin(), mine.end()), o = median(others),
                 ml = *std::min_element(mine_lat.begin(), mine_lat.end()), ol = median(others_lat);
    if (slower(m, ml, o, ol, evidence))
      findings.push_back({Status::Warn, "slow rank",
                          fmt::format("{}: its {} link(s) reach {:.1f} us, {} at best; the links between the "
                                      "others {:.1f} us, {}",
                                      who(facts, {e}), mine.size(), ml, rate(m), ol, rate(o)),
                          slow_rank_hint});
  }
  return findings;
}

Findings check_allreduce(const AllreduceFacts& a) {
  if (a.ranks == 1) return {{Status::Ok, "allreduce", "one rank: nothing to reduce, no clock to compare", ""}};
  const std::string text = fmt::format("{} ranks, {}, {} MiB float32: busbw {:.2f} GB/s, {:.0f} us", a.ranks, a.backend,
                                       a.bytes >> 20, a.busbw_gbs, a.time_us);
  if (a.wrong != 0)
    return {{Status::Fail, "allreduce", text + fmt::format(": {} wrong elements", a.wrong),
             "the collective returned wrong sums: a broken transport; run meridian bench comm, and with NCCL set "
             "NCCL_DEBUG=WARN"}};
  return {{Status::Ok, "allreduce", text, ""}};
}

Findings check_clocks(const Facts& facts, const std::vector<comm::ClockOffset>& offsets) {
  if (offsets.size() < 2) return {};
  std::vector<int> skewed;
  int worst = 0;
  double worst_abs = 0, worst_err = 0;
  for (int r = 0; r < static_cast<int>(offsets.size()); ++r) {
    const double off = std::abs(offsets[r].offset_s);
    if (off > kClockWarnS) skewed.push_back(r);
    if (off >= worst_abs) worst = r, worst_abs = off, worst_err = offsets[r].error_s;
  }
  const std::string text = fmt::format("largest offset to rank 0: {:.3f} ms ({}, +-{:.3f} ms)", worst_abs * 1e3,
                                       who(facts, {worst}), worst_err * 1e3);
  if (skewed.empty()) return {{Status::Ok, "clock", text, ""}};
  return {{Status::Warn, "clock",
           fmt::format("{}; {} off by more than {:.0f} ms", text, who(facts, skewed), kClockWarnS * 1e3),
           "clocks differ between nodes (timestamps in logs, traces and metrics will not line up): run NTP "
           "(chrony: systemctl enable --now chrony; chronyc tracking) on every node"}};
}

}  // namespace meridian::ops
