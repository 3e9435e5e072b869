// `meridian doctor`: preflight check of the machines a job runs on, under the same launcher as
// training. Every rank gathers facts about itself (host, cores, memory, run directory, /dev/shm, GPUs,
// versions, environment, the dataset's fingerprint); rank 0 compares them; then the ranks measure the
// network together (point-to-point between nodes, an allreduce over the job, clock offsets to rank 0).
// Rank 0 prints one line per check, OK / WARN / FAIL, with a hint under each WARN and FAIL; every rank
// exits 1 when a check FAILed, else 0. docs/troubleshooting.md explains each finding.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <spdlog/fmt/fmt.h>
#include <sys/statvfs.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "commands.h"
#include "meridian/build_config.h"
#include "meridian/comm/bench.h"
#include "meridian/comm/communicator.h"
#include "meridian/comm/probe.h"
#include "meridian/comm/runtime.h"
#include "meridian/comm/watchdog.h"
#include "meridian/core/error.h"
#include "meridian/core/stats.h"
#include "meridian/core/hash.h"
#include "meridian/core/units.h"
#ifdef MERIDIAN_WITH_DATA
#include "meridian/data/format.h"
#endif

namespace meridian::cli {

namespace {

using nlohmann::json;

constexpr double kGiB = 1024.0 * 1024 * 1024;
constexpr double kShmWarnBytes = 1 * kGiB;   // NCCL and Open MPI put intra-node buffers in /dev/shm
constexpr double kDiskFailBytes = 1 * kGiB;  // not even one checkpoint of a small model
constexpr double kDiskWarnBytes = 10 * kGiB;
constexpr double kMemWarnPerRank = 2 * kGiB;  // host memory available per rank on a node
constexpr double kSlowFactor = 3;             // a link (or rank) below 1/3 of the median is slow
constexpr double kLatencyFloorUs = 50;        // ...and latency above 3x the median only when also 50 us above it
constexpr double kClockWarnS = 0.1;
constexpr size_t kMaxPairs = 32;  // all pairs up to this many, else a ring
constexpr size_t kLatencyBytes = 8;
constexpr int kLatencyIters = 50;
constexpr size_t kHeadBytes = 1 << 20;  // the dataset bytes hashed on every rank
constexpr size_t kMaxNodeLines = 8;     // per-node checks: beyond this, OK nodes are summarised

enum class Status { Ok, Warn, Fail };

const char* label(Status s) { return s == Status::Ok ? "OK" : s == Status::Warn ? "WARN" : "FAIL"; }

// Rank 0's report: prints each line as it is added, so a later hang leaves what came before visible.
class Report {
 public:
  void add(Status status, const std::string& check, const std::string& text, const std::string& hint = "") {
    std::printf("%-4s  %-12s %s\n", label(status), check.c_str(), text.c_str());
    if (status != Status::Ok && !hint.empty()) std::printf("%-4s  %-12s hint: %s\n", "", "", hint.c_str());
    std::fflush(stdout);
    ++counts_[static_cast<int>(status)];
  }
  void section(const std::string& title) {
    std::printf("-- %s\n", title.c_str());
    std::fflush(stdout);
  }
  int count(Status s) const { return counts_[static_cast<int>(s)]; }

 private:
  int counts_[3] = {0, 0, 0};
};

struct Finding {
  Status status;
  std::string text, hint;
};

// One line per node, except that beyond kMaxNodeLines nodes the OK ones become one summary line.
void add_per_node(Report& report, const std::string& check, const std::vector<Finding>& findings) {
  size_t ok = 0;
  for (const auto& f : findings) ok += f.status == Status::Ok;
  const bool summarise = findings.size() > kMaxNodeLines && ok > 0;
  for (const auto& f : findings)
    if (!summarise || f.status != Status::Ok) report.add(f.status, check, f.text, f.hint);
  if (summarise) report.add(Status::Ok, check, fmt::format("{} more node(s) OK", ok));
}

// "all 4 ranks", "the only rank"
std::string all_ranks(size_t n) { return n == 1 ? "the only rank" : fmt::format("all {} ranks", n); }

std::string gib(double bytes) { return fmt::format("{:.1f} GiB", bytes / kGiB); }

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

// "ranks 2-3 (node-b)": the ranks and the hosts they run on.
std::string who(const std::vector<json>& facts, const std::vector<int>& ranks) {
  std::vector<std::string> hosts;
  for (int r : ranks) {
    const std::string h = facts[r]["host"];
    if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
  }
  std::string s = ranks_text(ranks) + " (";
  for (size_t i = 0; i < hosts.size(); ++i) s += (i ? ", " : "") + hosts[i];
  return s + ")";
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

// ---- Facts one rank gathers about itself.

std::map<std::string, double> meminfo() {
  std::map<std::string, double> m;
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (in >> key >> kb) {
    std::getline(in, unit);
    if (!key.empty() && key.back() == ':') key.pop_back();
    m[key] = kb * 1024;
  }
  return m;
}

// Free space and writability of the run directory (a file created, written and removed).
json run_dir_facts(const std::string& dir, int rank) {
  json j;
  std::error_code ec;
  const auto path = std::filesystem::absolute(dir, ec);
  std::string shown = ec ? dir : path.lexically_normal().string();
  if (shown.size() > 1 && shown.back() == '/') shown.pop_back();  // "/tmp/." normalises to "/tmp/"
  j["path"] = shown;
  struct statvfs vfs {};
  if (statvfs(dir.c_str(), &vfs) != 0) {
    j["error"] = fmt::format("statvfs: {}", std::strerror(errno));
    return j;
  }
  j["free"] = double(vfs.f_bavail) * double(vfs.f_frsize);
  const std::string probe = dir + "/.meridian-doctor-rank" + std::to_string(rank);
  {
    std::ofstream out(probe);
    if (!(out << "meridian doctor write test\n") || !(out.flush())) {
      j["error"] = fmt::format("cannot write a file there: {}", std::strerror(errno));
    }
  }
  std::filesystem::remove(probe, ec);
  return j;
}

json shm_facts() {
  json j;
  struct statvfs vfs {};
  if (statvfs("/dev/shm", &vfs) != 0) {
    j["error"] = fmt::format("/dev/shm: {}", std::strerror(errno));
    return j;
  }
  j["total"] = double(vfs.f_blocks) * double(vfs.f_frsize);
  j["free"] = double(vfs.f_bavail) * double(vfs.f_frsize);
  return j;
}

// The NVIDIA kernel driver's release ("550.54.15"), from the file its module provides; "" without one.
std::string nvidia_driver_release() {
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  std::getline(in, line);  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 ..."
  const auto at = line.find("Module");
  if (at == std::string::npos) return "";
  std::istringstream words(line.substr(at + 6));
  std::string release;
  words >> release;
  return release;
}

json gpu_facts() {
  const comm::GpuInventory inv = comm::local_gpus();
  json j;
  j["driver_release"] = nvidia_driver_release();
  j["queryable"] = inv.queryable;
  j["note"] = inv.note;
  j["driver"] = inv.driver_version;
  j["runtime"] = inv.runtime_version;
  j["gpus"] = json::array();
  for (const auto& g : inv.gpus)
    j["gpus"].push_back(
        {{"name", g.name}, {"memory", double(g.memory_bytes)}, {"cc", fmt::format("{}.{}", g.major, g.minor)}});
  return j;
}

// Variables that change how MPI, UCX, NCCL or meridian behave, minus what the launcher sets for its own use.
bool relevant_env(const std::string& name) {
  for (const char* exact : {"CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS"})
    if (name == exact) return true;
  for (const char* prefix : {"NCCL_", "UCX_", "MERIDIAN_"})
    if (name.rfind(prefix, 0) == 0) return true;
  if (name.rfind("OMPI_MCA_", 0) != 0) return false;  // OMPI_COMM_WORLD_RANK etc.: the launcher's
  for (const char* launcher :
       {"OMPI_MCA_orte_", "OMPI_MCA_prte_", "OMPI_MCA_ess", "OMPI_MCA_pmix", "OMPI_MCA_initial_wdir",
        "OMPI_MCA_shmem_RUNTIME_QUERY_hint", "OMPI_MCA_mpi_oversubscribe"})
    if (name.rfind(launcher, 0) == 0) return false;
  return true;
}

json env_facts() {
  json j = json::object();
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq != std::string::npos && relevant_env(kv.substr(0, eq))) j[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return j;
}

// Addresses this host's name resolves to, and its up, non-loopback IPv4 interfaces.
json network_facts(const std::string& host) {
  json j;
  j["resolves_to"] = json::array();
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) == 0) {
    std::set<std::string> seen;
    for (addrinfo* p = res; p; p = p->ai_next) {
      char text[INET_ADDRSTRLEN] = {0};
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(p->ai_addr)->sin_addr, text, sizeof(text));
      if (seen.insert(text).second) j["resolves_to"].push_back(text);
    }
    freeaddrinfo(res);
  }
  j["interfaces"] = json::array();
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) == 0) {
    for (ifaddrs* i = ifs; i; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) ||
          (i->ifa_flags & IFF_LOOPBACK))
        continue;
      char text[INET_ADDRSTRLEN] = {0};
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof(text));
      j["interfaces"].push_back(std::string(i->ifa_name) + " " + text);
    }
    freeifaddrs(ifs);
  }
  return j;
}

// FNV-1a of the file's bytes (the binary: the same build on every node?).
std::string file_hash(const std::string& path, size_t limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "unreadable";
  std::vector<char> buf(1 << 20);
  uint64_t h = kFnvOffset;
  size_t done = 0;
  while (done < limit && in) {
    in.read(buf.data(), static_cast<std::streamsize>(std::min(buf.size(), limit - done)));
    const auto got = static_cast<size_t>(in.gcount());
    if (got == 0) break;
    h = fnv1a(buf.data(), got, h);
    done += got;
  }
  return fmt::format("{:016x}", h);
}

// What identifies a dataset: validate_dataset's summary plus a hash of its first MiB.
json data_facts(const std::string& path) {
  json j;
  j["path"] = path;
#ifdef MERIDIAN_WITH_DATA
  try {
    const data::DatasetInfo info = data::validate_dataset(path);
    j["kind"] = info.kind;
    j["count"] = info.count;
    j["format_version"] = info.format_version;
    j["split"] = info.split;
    j["created_by"] = info.created_by;
    j["bytes"] = info.file_bytes;
    j["head"] = file_hash(path, kHeadBytes);
  } catch (const std::exception& e) {
    j["error"] = e.what();
  }
#endif
  return j;
}

std::string build_text() {
  return fmt::format("meridian {} (git {}, {})", MERIDIAN_VERSION, MERIDIAN_GIT, MERIDIAN_BUILD_TYPE);
}

std::string cuda_build_text() {
#ifdef MERIDIAN_WITH_NCCL
  return std::string("toolkit ") + MERIDIAN_CUDA_VERSION;
#elif defined(MERIDIAN_TORCH_CUDA)
  return "CUDA LibTorch, no toolkit";
#else
  return "not compiled in";
#endif
}

json gather_facts(const comm::Runtime& rt, const std::string& run_dir, const std::string& data_path) {
  json j;
  j["rank"] = rt.rank();
  j["host"] = rt.host();
  j["local_rank"] = rt.local_rank();
  j["local_size"] = rt.local_size();
  j["cores"] = static_cast<int>(std::thread::hardware_concurrency());
  j["bound_cpus"] = rt.bound_cpus();
  j["threads"] = rt.threads();
  j["device"] = rt.device().str();
  const auto mem = meminfo();
  j["mem_total"] = mem.count("MemTotal") ? mem.at("MemTotal") : -1.0;
  j["mem_available"] = mem.count("MemAvailable") ? mem.at("MemAvailable") : -1.0;
  j["run_dir"] = run_dir_facts(run_dir, rt.rank());
  j["shm"] = shm_facts();
  j["build"] = build_text();
  j["binary"] = file_hash("/proc/self/exe", SIZE_MAX);
  j["torch"] = TORCH_VERSION;
  j["mpi"] = comm::mpi_library_version();
  j["nccl"] = comm::nccl_version();
  j["cuda_build"] = cuda_build_text();
  j["gpu"] = gpu_facts();
  j["env"] = env_facts();
  j["net"] = network_facts(rt.host());
  if (!data_path.empty()) j["data"] = data_facts(data_path);
  return j;
}

// ---- Rank 0's analysis of the gathered facts.

struct Node {
  std::string host;
  std::vector<int> ranks;
};

std::vector<Node> nodes_of(const std::vector<json>& facts) {
  std::vector<Node> nodes;
  for (const auto& f : facts) {
    const std::string host = f["host"];
    auto it = std::find_if(nodes.begin(), nodes.end(), [&](const Node& n) { return n.host == host; });
    if (it == nodes.end())
      nodes.push_back({host, {f["rank"].get<int>()}});
    else
      it->ranks.push_back(f["rank"]);
  }
  return nodes;
}

// "2 each" when all ranks have the same value, else "2,2,1,2".
std::string per_rank_list(const std::vector<json>& facts, const std::vector<int>& ranks, const char* key) {
  std::vector<std::string> v;
  for (int r : ranks) v.push_back(facts[r][key].dump());
  if (std::all_of(v.begin(), v.end(), [&](const std::string& x) { return x == v[0]; })) return v[0] + " each";
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + v[i];
  return s;
}

void check_nodes(Report& report, const std::vector<json>& facts, const std::vector<Node>& nodes) {
  std::vector<Finding> cores, memory, disk, shm, gpus;
  for (const auto& node : nodes) {
    const json& first = facts[node.ranks.front()];
    const int n = static_cast<int>(node.ranks.size());
    const int c = first["cores"];
    const std::string head = fmt::format("{}: {} cores, {} rank(s) ({})", node.host, c, n, ranges(node.ranks));
    bool all_single = true;
    for (int r : node.ranks) all_single = all_single && facts[r]["bound_cpus"].get<int>() == 1;
    const std::string detail =
        fmt::format("{}, bound CPUs {}, threads {}", head, per_rank_list(facts, node.ranks, "bound_cpus"),
                    per_rank_list(facts, node.ranks, "threads"));
    if (n > c)
      cores.push_back({Status::Warn, detail + ": more ranks than cores",
                       "start at most one rank per core (one per GPU on GPU nodes); expected on a small test machine"});
    else if (all_single && c >= 2 * n)
      cores.push_back({Status::Warn, detail + ": each rank runs on 1 CPU while the node has " + std::to_string(c),
                       "mpirun binds each rank to one core when it starts 2 ranks or fewer: add --bind-to none or "
                       "--map-by socket:PE=<cores per rank>"});
    else
      cores.push_back({Status::Ok, detail, ""});

    const double total = first["mem_total"], avail = first["mem_available"];
    if (total < 0 || avail < 0)
      memory.push_back({Status::Warn, node.host + ": /proc/meminfo unreadable", "a Linux node has /proc/meminfo"});
    else {
      const std::string text =
          fmt::format("{}: {} total, {} available ({} per rank)", node.host, gib(total), gib(avail), gib(avail / n));
      if (avail / n < kMemWarnPerRank)
        memory.push_back({Status::Warn, text + ", below " + gib(kMemWarnPerRank) + " per rank",
                          "other processes hold the memory (top, nvidia-smi) or start fewer ranks on this node"});
      else
        memory.push_back({Status::Ok, text, ""});
    }

    // The run directory: the worst rank on the node speaks for it.
    const json* worst = &first["run_dir"];
    for (int r : node.ranks) {
      const json& d = facts[r]["run_dir"];
      if (d.contains("error") || (!worst->contains("error") && d.value("free", 0.0) < worst->value("free", 0.0)))
        worst = &d;
    }
    const std::string path = (*worst)["path"];
    if (worst->contains("error")) {
      disk.push_back(
          {Status::Fail, fmt::format("{}: run dir {}: {}", node.host, path, (*worst)["error"].get<std::string>()),
           "checkpoints and logs go to the run directory: pass a writable --run-dir (the same as for train)"});
    } else {
      const double free = (*worst)["free"];
      const std::string text = fmt::format("{}: run dir {}: {} free", node.host, path, gib(free));
      if (free < kDiskFailBytes)
        disk.push_back({Status::Fail, text,
                        "free space on that file system or choose another --run-dir: a checkpoint "
                        "that does not fit stops the run"});
      else if (free < kDiskWarnBytes)
        disk.push_back({Status::Warn, text + ", below " + gib(kDiskWarnBytes),
                        "checkpoints of a large model need tens of GiB: free space, lower checkpoint.keep_last, or "
                        "choose another --run-dir"});
      else
        disk.push_back({Status::Ok, text, ""});
    }

    const json& s = first["shm"];
    const std::string shm_hint =
        "NCCL and Open MPI's shared-memory transport keep intra-node buffers in /dev/shm: docker run --shm-size=8g, "
        "or mount -o remount,size=8G /dev/shm";
    if (s.contains("error"))
      shm.push_back({Status::Warn, node.host + ": " + s["error"].get<std::string>(), shm_hint});
    else if (s["total"].get<double>() < kShmWarnBytes)
      shm.push_back({Status::Warn,
                     fmt::format("{}: /dev/shm {} ({} free), below {}", node.host, gib(s["total"]), gib(s["free"]),
                                 gib(kShmWarnBytes)),
                     shm_hint});
    else
      shm.push_back(
          {Status::Ok, fmt::format("{}: /dev/shm {} ({} free)", node.host, gib(s["total"]), gib(s["free"])), ""});

    const json& g = first["gpu"];
    const int count = static_cast<int>(g["gpus"].size());
    std::vector<std::string> devices;
    for (int r : node.ranks) devices.push_back(facts[r]["device"]);
    const bool on_cpu = std::any_of(devices.begin(), devices.end(), [](const std::string& d) { return d == "cpu"; });
    const std::string versions = fmt::format("driver {}(CUDA {}), runtime {}", g["driver_release"].get<std::string>() + " ",
                                             comm::cuda_version_text(g["driver"]), comm::cuda_version_text(g["runtime"]));
    if (!g["queryable"].get<bool>()) {
      gpus.push_back(
          {Status::Ok, node.host + ": none queried (" + g["note"].get<std::string>() + "); ranks on cpu", ""});
    } else if (count == 0) {
      const int driver = g["driver"], runtime = g["runtime"];
      if (driver > 0 && runtime > driver)
        gpus.push_back({Status::Fail,
                        fmt::format("{}: no usable GPU: {}; {}", node.host, g["note"].get<std::string>(), versions),
                        "the NVIDIA driver is older than the CUDA runtime meridian was built with: update the driver "
                        "(nvidia-smi shows the CUDA version it supports) or build with a matching CUDA"});
      else
        gpus.push_back(
            {Status::Ok, fmt::format("{}: no GPU ({}); ranks on cpu", node.host, g["note"].get<std::string>()), ""});
    } else {
      std::map<std::string, int> models;
      for (const auto& d : g["gpus"])
        models[fmt::format("{} ({}, cc {})", d["name"].get<std::string>(), gib(d["memory"]),
                           d["cc"].get<std::string>())]++;
      std::string list;
      for (const auto& [m, k] : models) list += (list.empty() ? "" : ", ") + std::to_string(k) + " x " + m;
      const std::string text = fmt::format("{}: {}; {}; {} rank(s)", node.host, list, versions, n);
      if (on_cpu)
        gpus.push_back(
            {Status::Warn, text + " run on cpu",
             "GPUs are visible but unused: a CPU-only LibTorch cannot use them (build against a CUDA LibTorch, "
             "-DCMAKE_PREFIX_PATH=<libtorch>), or --device cpu was given"});
      else if (count > n)
        gpus.push_back({Status::Warn, text + fmt::format(" for {} GPUs: {} idle", count, count - n),
                        "start one rank per GPU (mpirun -npernode <GPUs>, Slurm --ntasks-per-node=<GPUs>)"});
      else if (models.size() > 1)
        gpus.push_back({Status::Warn, text + ": mixed models on one node",
                        "data parallelism runs at the slowest GPU's pace; restrict CUDA_VISIBLE_DEVICES to one model"});
      else
        gpus.push_back({Status::Ok, text, ""});
    }
  }
  add_per_node(report, "cores", cores);
  add_per_node(report, "memory", memory);
  add_per_node(report, "disk", disk);
  add_per_node(report, "shm", shm);
  add_per_node(report, "gpus", gpus);
}

// Same value on every rank, or `on_mismatch` naming every group that differs from rank 0's.
void compare(Report& report, const std::vector<json>& facts, const std::string& check, Status on_mismatch,
             const std::function<std::string(const json&)>& value, const std::string& hint) {
  std::vector<std::string> values;
  for (const auto& f : facts) values.push_back(value(f));
  const auto groups = group_by(values);
  if (groups.size() == 1) {
    report.add(Status::Ok, check, groups[0].first + " on " + all_ranks(facts.size()));
    return;
  }
  std::string text = "differs: ";
  for (size_t i = 0; i < groups.size(); ++i)
    text += fmt::format("{}{} has {}", i ? "; " : "", who(facts, groups[i].second), groups[i].first);
  report.add(on_mismatch, check, text, hint);
}

void check_consistency(Report& report, const std::vector<json>& facts, const std::vector<Node>& nodes, int node_count) {
  const auto field = [](const char* key) { return [key](const json& f) { return f[key].get<std::string>(); }; };
  const std::string rebuild =
      "every node must run the same meridian build: share one build directory (NFS) or "
      "install the same packages and build the same commit on every node";
  compare(report, facts, "build", Status::Fail, field("build"), rebuild);
  compare(
      report, facts, "binary", Status::Warn, [](const json& f) { return "fnv " + f["binary"].get<std::string>(); },
      "the meridian binaries differ: fine when each node built the same commit itself, else copy one build");
  compare(report, facts, "libtorch", Status::Fail, field("torch"), rebuild);
  compare(report, facts, "mpi", Status::Fail, field("mpi"),
          "every node must have the same Open MPI (jobs/setup-node.sh installs Debian's on each node)");
  compare(report, facts, "nccl", Status::Fail, field("nccl"),
          "mismatched NCCL versions can hang or corrupt collectives: install the same NCCL on every node");
  compare(
      report, facts, "cuda", Status::Fail,
      [](const json& f) {
        return f["cuda_build"].get<std::string>() + ", runtime " +
               comm::cuda_version_text(f["gpu"]["runtime"].get<int>());
      },
      "the same CUDA toolkit and runtime on every node (the same build, the same LibTorch)");
  bool queryable = false;
  for (const auto& f : facts) queryable = queryable || f["gpu"]["queryable"].get<bool>();
  if (queryable)
    compare(
        report, facts, "driver", Status::Warn,
        [](const json& f) {
          const int v = f["gpu"]["driver"];
          const std::string release = f["gpu"]["driver_release"];
          if (v <= 0 && release.empty()) return std::string("no NVIDIA driver");
          return (release.empty() ? "" : release + ", ") + "supports CUDA " + comm::cuda_version_text(v);
        },
        "NVIDIA drivers differ between nodes: install the same driver version everywhere");
  bool any_gpu = false;
  for (const auto& f : facts) any_gpu = any_gpu || !f["gpu"]["gpus"].empty();
  if (any_gpu) {
    compare(
        report, facts, "gpu model", Status::Warn,
        [](const json& f) {
          const json& g = f["gpu"]["gpus"];
          return g.empty() ? std::string("no GPU") : g[0]["name"].get<std::string>();
        },
        "data parallelism runs at the slowest GPU's pace: use one GPU model for the job");
  }

  // Host names: Open MPI counts nodes by shared memory; two nodes with one name confuse hostfiles and logs.
  if (static_cast<int>(nodes.size()) != node_count)
    report.add(Status::Warn, "hostnames",
               fmt::format("{} node(s) but {} distinct host name(s)", node_count, nodes.size()),
               "give every node a unique name (hostnamectl set-hostname) and list each in /etc/hosts");

  // The run directory must be one directory seen by every node: checkpoints are one file written by all ranks.
  std::vector<int> blind;
  for (const auto& f : facts)
    if (!f.value("sees_run_dir", false)) blind.push_back(f["rank"]);
  const std::string dir = facts[0]["run_dir"]["path"];
  if (facts[0]["run_dir"].contains("error"))
    report.add(Status::Warn, "shared dir", dir + ": not checked, rank 0 cannot write there (see disk)",
               "make the run directory writable or pass another --run-dir, then run doctor again");
  else if (blind.empty())
    report.add(Status::Ok, "shared dir",
               fmt::format("{}: every rank sees rank 0's file there{}", dir, node_count > 1 ? "" : " (one node)"));
  else
    report.add(Status::Fail, "shared dir",
               fmt::format("{}: {} do not see the file rank 0 wrote there", dir, who(facts, blind)),
               "checkpoints are one file written by all ranks and metrics go to one run directory: put --run-dir on "
               "storage that every node mounts at the same path (NFS) and pass the same --run-dir to train");

  // Environment: what rank 0 has, and any variable whose value differs between ranks.
  std::string listed;
  for (const auto& [k, v] : facts[0]["env"].items())
    listed += (listed.empty() ? "" : " ") + k + "=" + v.get<std::string>();
  report.add(Status::Ok, "environment",
             listed.empty() ? "rank 0: no NCCL_*, UCX_*, OMPI_MCA_*, MERIDIAN_* variables set" : "rank 0: " + listed);
  std::set<std::string> names;
  for (const auto& f : facts)
    for (const auto& [k, v] : f["env"].items()) names.insert(k);
  names.erase("CUDA_VISIBLE_DEVICES");  // launchers set it per rank on purpose
  for (const auto& name : names) {
    std::vector<std::string> values;
    for (const auto& f : facts)
      values.push_back(f["env"].contains(name) ? "'" + f["env"][name].get<std::string>() + "'" : "unset");
    const auto groups = group_by(values);
    if (groups.size() == 1) continue;
    std::string text = name + " differs: ";
    for (size_t i = 0; i < groups.size(); ++i)
      text += fmt::format("{}{} {}", i ? "; " : "", who(facts, groups[i].second), groups[i].first);
    report.add(Status::Warn, "environment", text,
               "mpirun passes variables to other nodes only with -x NAME (Slurm: --export): set them for every rank "
               "in the job script");
  }

  // Interfaces and name resolution matter once traffic leaves the node.
  if (node_count > 1) {
    const json& env = facts[0]["env"];
    const bool chosen = env.contains("NCCL_SOCKET_IFNAME") || env.contains("OMPI_MCA_btl_tcp_if_include") ||
                        env.contains("OMPI_MCA_btl_tcp_if_exclude");
    std::vector<Finding> net;
    for (const auto& node : nodes) {
      const json& n = facts[node.ranks.front()]["net"];
      std::string ifs, addrs;
      for (const auto& i : n["interfaces"]) ifs += (ifs.empty() ? "" : ", ") + i.get<std::string>();
      for (const auto& a : n["resolves_to"]) addrs += (addrs.empty() ? "" : ", ") + a.get<std::string>();
      const std::string text = fmt::format("{}: resolves to {}; interfaces {}", node.host,
                                           addrs.empty() ? "nothing" : addrs, ifs.empty() ? "none" : ifs);
      const bool loopback = std::any_of(n["resolves_to"].begin(), n["resolves_to"].end(),
                                        [](const json& a) { return a.get<std::string>().rfind("127.", 0) == 0; });
      if (addrs.empty() || loopback)
        net.push_back({Status::Warn, text,
                       "map every node's name to its cluster address in /etc/hosts on every node (Debian maps its own "
                       "name to 127.0.1.1), or set up DNS"});
      else if (n["interfaces"].size() > 1 && !chosen)
        net.push_back(
            {Status::Warn, text + "; no interface chosen (NCCL_SOCKET_IFNAME, OMPI_MCA_btl_tcp_if_include unset)",
             "with several interfaces (docker0, virbr0) NCCL and Open MPI may pick one the other nodes cannot "
             "reach: set NCCL_SOCKET_IFNAME=<if> and OMPI_MCA_btl_tcp_if_include=<if> (docs/troubleshooting.md)"});
      else
        net.push_back({Status::Ok, text, ""});
    }
    add_per_node(report, "interfaces", net);
  }
}

void check_data(Report& report, const std::vector<json>& facts) {
  const std::string hint =
      "every rank must read the same dataset: a data path that points elsewhere on one node, or not the same NFS "
      "export (compare mount; ls -l the path on each node)";
  std::vector<std::string> errors;
  for (const auto& f : facts) errors.push_back(f["data"].value("error", ""));
  bool broken = false;
  for (const auto& [error, ranks] : group_by(errors)) {
    if (error.empty()) continue;
    broken = true;
    report.add(Status::Fail, "data", fmt::format("{}: {}", who(facts, ranks), error), hint);
  }
  if (broken) return;
  const std::vector<std::string> keys{"kind", "count", "format_version", "split", "created_by", "bytes", "head"};
  std::vector<std::string> prints;
  for (const auto& f : facts) {
    std::string p;
    for (const auto& k : keys) p += f["data"][k].dump() + "|";
    prints.push_back(p);
  }
  const auto groups = group_by(prints);
  const auto describe = [](const json& d) {
    return fmt::format("{}: {} {} sample(s), {} bytes, first MiB fnv {}", d["path"].get<std::string>(),
                       d["kind"].get<std::string>(), d["count"].get<int64_t>(), d["bytes"].get<uint64_t>(),
                       d["head"].get<std::string>());
  };
  if (groups.size() == 1) {
    report.add(Status::Ok, "data", describe(facts[0]["data"]) + " on " + all_ranks(facts.size()));
    return;
  }
  const json& ref = facts[0]["data"];
  for (size_t i = 1; i < groups.size(); ++i) {
    const json& d = facts[groups[i].second.front()]["data"];
    std::string differ;
    for (const auto& k : keys)
      if (d[k] != ref[k]) differ += (differ.empty() ? "" : ", ") + (k == "head" ? std::string("first MiB") : k);
    report.add(Status::Fail, "data",
               fmt::format("{} see a different dataset than {}: {} vs {} (differs in {})", who(facts, groups[i].second),
                           who(facts, groups[0].second), describe(d), describe(ref), differ),
               hint);
  }
}

// ---- Network.

// One rank per node (its local rank 0) when the job spans nodes; every rank on a single node, so it still
// has pairs to measure.
std::vector<int> representatives(const std::vector<json>& facts, int node_count) {
  std::vector<int> reps;
  for (const auto& f : facts)
    if (node_count == 1 || f["local_rank"].get<int>() == 0) reps.push_back(f["rank"]);
  return reps;
}

// Every pair up to kMaxPairs; beyond, a ring (each to the next) and each to the one half-way round.
std::vector<std::pair<int, int>> choose_pairs(const std::vector<int>& reps) {
  std::vector<std::pair<int, int>> pairs;
  const size_t n = reps.size();
  if (n * (n - 1) / 2 <= kMaxPairs) {
    for (size_t i = 0; i < n; ++i)
      for (size_t j = i + 1; j < n; ++j) pairs.push_back({reps[i], reps[j]});
    return pairs;
  }
  std::set<std::pair<int, int>> seen;
  for (size_t i = 0; i < n; ++i)
    for (size_t step : {size_t(1), n / 2}) {
      const int a = reps[i], b = reps[(i + step) % n];
      if (a != b && seen.insert({std::min(a, b), std::max(a, b)}).second)
        pairs.push_back({std::min(a, b), std::max(a, b)});
    }
  return pairs;
}

struct Measured {
  comm::PairResult latency, bandwidth;
};

// Slow compared with a reference: bandwidth below 1/kSlowFactor of it, or latency above kSlowFactor times
// it (and kLatencyFloorUs more, so that microsecond jitter between ranks of one node is no finding).
bool slower(double bw, double lat_us, double ref_bw, double ref_lat_us) {
  return bw * kSlowFactor < ref_bw || lat_us > std::max(kSlowFactor * ref_lat_us, ref_lat_us + kLatencyFloorUs);
}

void report_pairs(Report& report, const std::vector<json>& facts, const std::vector<Measured>& pairs, uint64_t bytes,
                  bool between_nodes) {
  const auto name = [&](int r) { return fmt::format("{} r{}", facts[r]["host"].get<std::string>(), r); };
  std::vector<double> bws, lats;
  for (const auto& p : pairs) bws.push_back(p.bandwidth.bandwidth_gbs), lats.push_back(p.latency.one_way_us);
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
  std::vector<Finding> lines;
  for (const auto& p : pairs) {
    const std::string text =
        fmt::format("{} <-> {}: latency {:.1f} us, bandwidth {:.2f} GB/s ({} MiB messages)", name(p.bandwidth.a),
                    name(p.bandwidth.b), p.latency.one_way_us, p.bandwidth.bandwidth_gbs, bytes >> 20);
    if (pairs.size() > 1 && slower(p.bandwidth.bandwidth_gbs, p.latency.one_way_us, med, med_lat))
      lines.push_back({Status::Warn,
                       text + fmt::format(": slow link (median of all pairs: {:.1f} us, {:.2f} GB/s)", med_lat, med),
                       slow_hint});
    else
      lines.push_back({Status::Ok, text, ""});
  }
  size_t shown = 0;
  for (const auto& l : lines)
    if (l.status != Status::Ok || lines.size() <= 2 * kMaxNodeLines)
      report.add(l.status, "p2p", l.text, l.hint), ++shown;
  if (shown < lines.size())
    report.add(Status::Ok, "p2p",
               fmt::format("{} more pair(s) OK; median {:.2f} GB/s, min {:.2f}, max {:.2f}", lines.size() - shown, med,
                           *std::min_element(bws.begin(), bws.end()), *std::max_element(bws.begin(), bws.end())));

  // A slow rank or node shows as all its links slow: compare each endpoint's links with the links between the others.
  std::set<int> endpoints;
  for (const auto& p : pairs) endpoints.insert(p.bandwidth.a), endpoints.insert(p.bandwidth.b);
  for (int e : endpoints) {
    std::vector<double> mine, others, mine_lat, others_lat;
    for (const auto& p : pairs) {
      const bool in = p.bandwidth.a == e || p.bandwidth.b == e;
      (in ? mine : others).push_back(p.bandwidth.bandwidth_gbs);
      (in ? mine_lat : others_lat).push_back(p.latency.one_way_us);
    }
    if (mine.empty() || others.empty()) continue;
    const double m = median(mine), o = median(others), ml = median(mine_lat), ol = median(others_lat);
    if (slower(m, ml, o, ol))
      report.add(Status::Warn, "slow rank",
                 fmt::format("{}: its {} link(s) reach {:.1f} us, {:.2f} GB/s (median); the links between the others "
                             "{:.1f} us, {:.2f} GB/s",
                             who(facts, {e}), mine.size(), ml, m, ol, o),
                 slow_rank_hint);
  }
}

struct DoctorOptions {
  std::string run_dir, data;
  uint64_t p2p_bytes = 4u << 20, allreduce_bytes = 32u << 20;
  int iters = 10;
  int delay_rank = -1;  // --inject-delay: test hook
  double delay_us = 0;
};

void parse_inject_delay(const std::string& text, DoctorOptions& o) {
  if (text.empty()) return;
  const auto colon = text.find(':');
  char* end = nullptr;
  if (colon != std::string::npos) {
    const long rank = std::strtol(text.c_str(), &end, 10);
    const double us = std::strtod(text.c_str() + colon + 1, nullptr);
    if (end == text.c_str() + colon && rank >= 0 && us > 0) {
      o.delay_rank = static_cast<int>(rank);
      o.delay_us = us;
      return;
    }
  }
  throw UserError("--inject-delay: expected RANK:MICROSECONDS (e.g. 1:2000), got '" + text + "'");
}

void run_network(Report* report, const comm::Runtime& rt, const std::vector<json>& facts, const DoctorOptions& o) {
  const double delay = rt.rank() == o.delay_rank ? o.delay_us : 0;
  const auto pairs = choose_pairs(representatives(facts, rt.node_count()));
  // The probes run outside any communicator, so they get a watchdog of their own: two ranks that cannot
  // exchange messages (a firewall between their nodes) end the job with their names instead of a hang.
  comm::Watchdog watchdog(rt.comm_timeout_s(), [&](const std::string& what, double elapsed) {
    comm::abort_job(fmt::format("{} doctor: {} did not complete within {} s (elapsed {:.1f} s): these ranks cannot "
                                "exchange messages (firewall, interface, /etc/hosts: see docs/troubleshooting.md)",
                                where(), what, rt.comm_timeout_s(), elapsed),
                    kExitFatal);
  });
  std::vector<Measured> measured;
  for (const auto& [a, b] : pairs) {
    const uint64_t id = watchdog.begin(fmt::format("ping-pong between {} and {}", who(facts, {a}), who(facts, {b})));
    Measured m;
    m.latency = comm::ping_pong(rt, a, b, kLatencyBytes, kLatencyIters, delay);
    m.bandwidth = comm::ping_pong(rt, a, b, o.p2p_bytes, o.iters, delay);
    measured.push_back(m);
    watchdog.end(id);
  }
  if (report) {
    if (pairs.empty())
      report->add(Status::Ok, "p2p", "one rank: no pair to measure");
    else
      report_pairs(*report, facts, measured, o.p2p_bytes, rt.node_count() > 1);
  }

  // The collective training uses, on its backend: busbw, and the result checked against closed form.
  if (rt.size() == 1) {
    if (report) report->add(Status::Ok, "allreduce", "one rank: nothing to reduce, no clock to compare");
    return;
  }
  comm::CommBenchOptions bench;
  bench.min_bytes = bench.max_bytes = o.allreduce_bytes;
  bench.warmup = 2;
  bench.iters = o.iters;
  bench.reference = false;
  const comm::Backend backend = comm::default_backend(rt);
  auto communicator = comm::make_communicator(rt, backend);
  const auto rows = comm::run_comm_bench(rt, *communicator, bench);
  communicator.reset();
  if (report) {
    const auto& row = rows.front();
    const std::string text = fmt::format("{} ranks, {}, {} MiB float32: busbw {:.2f} GB/s, {:.0f} us", rt.size(),
                                         comm::to_string(backend), row.bytes >> 20, row.busbw_gbs, row.time_us);
    if (row.wrong != 0)
      report->add(Status::Fail, "allreduce", text + fmt::format(": {} wrong elements", row.wrong),
                  "the collective returned wrong sums: a broken transport; run meridian bench comm, and with NCCL set "
                  "NCCL_DEBUG=WARN");
    else
      report->add(Status::Ok, "allreduce", text);
  }

  const uint64_t id = watchdog.begin("clock offset exchange with rank 0");
  const comm::ClockOffset mine = comm::clock_offset_to_root(rt);
  watchdog.end(id);
  const auto offsets = rt.gather_to_root(fmt::format("{:.9f} {:.9f}", mine.offset_s, mine.error_s));
  if (report) {
    std::vector<int> skewed;
    int worst = 0;
    double worst_abs = 0, worst_err = 0;
    for (int r = 0; r < static_cast<int>(offsets.size()); ++r) {
      double off = 0, err = 0;
      std::sscanf(offsets[r].c_str(), "%lf %lf", &off, &err);
      if (std::abs(off) > kClockWarnS) skewed.push_back(r);
      if (std::abs(off) >= worst_abs) worst = r, worst_abs = std::abs(off), worst_err = err;
    }
    const std::string text = fmt::format("largest offset to rank 0: {:.3f} ms ({}, +-{:.3f} ms)", worst_abs * 1e3,
                                         who(facts, {worst}), worst_err * 1e3);
    if (skewed.empty())
      report->add(Status::Ok, "clock", text);
    else
      report->add(Status::Warn, "clock",
                  fmt::format("{}; {} off by more than {:.0f} ms", text, who(facts, skewed), kClockWarnS * 1e3),
                  "clocks differ between nodes (timestamps in logs, traces and metrics will not line up): run NTP "
                  "(chrony: systemctl enable --now chrony; chronyc tracking) on every node");
  }
}

}  // namespace

Command doctor_command() {
  Command c;
  c.name = "doctor";
  c.summary = "Preflight check of every rank's machine, versions, data and network (run under the training launcher)";
  // clang-format off
  c.add_options = [](cxxopts::Options& o) {
    o.custom_help("[options]   (one line per check: OK, WARN or FAIL with a hint; exit 1 on any FAIL; the free space "
                  "checked is that of --run-dir, default the current directory: pass the run directory of training)");
    o.add_options()
        ("data", "Dataset every rank must see identically (fingerprint: format summary + hash of the first MiB)", cxxopts::value<std::string>()->default_value(""))
        ("p2p-bytes", "Message size of the point-to-point bandwidth probe (suffix K, M, G)", cxxopts::value<std::string>()->default_value("4M"))
        ("allreduce-bytes", "Message size of the allreduce probe (suffix K, M, G)", cxxopts::value<std::string>()->default_value("32M"))
        ("iters", "Timed round trips per pair and timed allreduces", cxxopts::value<int>()->default_value("10"));
    // Not in --help: a test hook that makes one rank's side of every ping-pong slower.
    o.add_options("testing")
        ("inject-delay", "RANK:US: that rank sleeps US microseconds before each ping-pong message it sends (on several nodes, only local rank 0s are measured)", cxxopts::value<std::string>()->default_value(""));
  };
  // clang-format on
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    DoctorOptions o;
    o.run_dir = p["run-dir"].as<std::string>();
    if (o.run_dir.empty()) o.run_dir = ".";
    o.data = p["data"].as<std::string>();
    o.p2p_bytes = parse_bytes(p["p2p-bytes"].as<std::string>(), "--p2p-bytes");
    o.allreduce_bytes = parse_bytes(p["allreduce-bytes"].as<std::string>(), "--allreduce-bytes");
    o.iters = p["iters"].as<int>();
    parse_inject_delay(p["inject-delay"].as<std::string>(), o);
    if (o.iters < 1) throw UserError("--iters: must be >= 1");
    if (o.p2p_bytes > (1ull << 30)) throw UserError("--p2p-bytes: at most 1G");
    if (o.delay_rank >= rt.size())
      throw UserError(fmt::format("--inject-delay: rank {} does not exist ({} ranks)", o.delay_rank, rt.size()));
#ifndef MERIDIAN_WITH_DATA
    if (!o.data.empty()) throw UserError("--data: this build has no data area (-DMERIDIAN_WITH_DATA=OFF)");
#endif

    // Does every rank see the run directory rank 0 sees? Rank 0 leaves a file with a token, the others read it.
    uint64_t token =
        rt.rank() == 0
            ? splitmix64(uint64_t(std::chrono::system_clock::now().time_since_epoch().count()) ^ uint64_t(getpid()))
            : 0;
    rt.broadcast_bytes(&token, sizeof(token), 0);
    const std::string token_file = o.run_dir + fmt::format("/.meridian-doctor-{:016x}", token);
    if (rt.rank() == 0) std::ofstream(token_file) << token << "\n";
    rt.barrier();
    uint64_t seen = 0;
    std::ifstream(token_file) >> seen;

    json mine = gather_facts(rt, o.run_dir, o.data);
    mine["sees_run_dir"] = seen == token;
    std::vector<json> facts;
    for (const auto& s : rt.allgather(mine.dump())) facts.push_back(json::parse(s));
    rt.barrier();  // everyone has read the token file
    if (rt.rank() == 0) {
      std::error_code ec;
      std::filesystem::remove(token_file, ec);
    }

    std::unique_ptr<Report> report;
    if (rt.rank() == 0) {
      report = std::make_unique<Report>();
      const auto nodes = nodes_of(facts);
      std::printf("meridian doctor: %d rank(s) on %d node(s), %s\n", rt.size(), rt.node_count(), build_text().c_str());
      report->section("nodes");
      check_nodes(*report, facts, nodes);
      report->section("consistency across ranks");
      check_consistency(*report, facts, nodes, rt.node_count());
      if (!o.data.empty()) check_data(*report, facts);
      report->section(fmt::format(
          "network ({})", rt.node_count() > 1 ? "between nodes: local rank 0 of each" : "one node: between its ranks"));
    }
    run_network(report.get(), rt, facts, o);

    int rc = kExitOk;
    if (report) {
      rc = report->count(Status::Fail) > 0 ? kExitCheckFailed : kExitOk;
      std::printf("doctor: %d OK, %d WARN, %d FAIL\n", report->count(Status::Ok), report->count(Status::Warn),
                  report->count(Status::Fail));
      std::fflush(stdout);
    }
    rt.broadcast_bytes(&rc, sizeof(rc), 0);
    return rc;
  };
  return c;
}

}  // namespace meridian::cli
