// The doctor's checks of consistency across ranks: versions, host names, the shared directory, the
// environment, the interfaces and the data.
#include <arpa/inet.h>
#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <sstream>

#include "checks_common.h"
#include "meridian/core/stats.h"
#include "meridian/ops/checks.h"

namespace meridian::ops {

using namespace detail;

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

}  // namespace meridian::ops
