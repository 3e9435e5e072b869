#include "meridian/ops/facts.h"

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
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "meridian/build_config.h"
#include "meridian/comm/communicator.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/cpu_usage.h"
#include "meridian/core/hash.h"
#include "meridian/git.h"

namespace meridian::ops {

bool cpuinfo_has_native_bf16(std::istream& in) {
  for (std::string line; std::getline(in, line);)
    if (line.rfind("flags", 0) == 0)
      return line.find(" avx512_bf16") != std::string::npos || line.find(" amx_bf16") != std::string::npos;
  return false;
}

bool cpu_has_native_bf16() {
  std::ifstream in("/proc/cpuinfo");
  return cpuinfo_has_native_bf16(in);
}

namespace {

double read_number(const std::string& path) {  // a file holding one number; -1 for "max", absent or unreadable
  std::ifstream in(path);
  double v = -1;
  return in >> v ? v : -1;
}

double stat_field(const std::string& path, const std::string& key) {  // "key value" lines of memory.stat
  std::ifstream in(path);
  std::string k;
  double v = 0;
  while (in >> k >> v)
    if (k == key) return v;
  return 0;
}

}  // namespace

MemoryFacts within_cgroup(MemoryFacts host, double limit, double usage, double inactive_file,
                          const std::string& group) {
  if (limit <= 0 || (host.total > 0 && limit >= host.total)) return host;
  const double free = std::max(0.0, limit - std::max(0.0, usage - inactive_file));
  host.total = limit;
  host.available = host.available >= 0 ? std::min(host.available, free) : free;
  host.limit = "cgroup memory limit of " + group;
  return host;
}

MemoryFacts memory_facts() {
  std::ifstream meminfo("/proc/meminfo");
  MemoryFacts m = parse_meminfo(meminfo);
  std::ifstream cgroups("/proc/self/cgroup");
  for (std::string line; std::getline(cgroups, line);) {
    // "0::/path" (v2) or "N:memory:/path" (v1, memory among its controllers)
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",", group = line.substr(b + 1);
    if (controllers == ",," &&
        std::ifstream("/sys/fs/cgroup/cgroup.controllers")) {  // v2: the smallest limit up the tree
      const std::string dir = "/sys/fs/cgroup" + (group == "/" ? "" : group);
      double limit = -1;
      for (std::string g = group; !g.empty(); g = g == "/" ? "" : g.substr(0, std::max<size_t>(1, g.rfind('/')))) {
        const double l = read_number("/sys/fs/cgroup" + (g == "/" ? "" : g) + "/memory.max");
        if (l > 0 && (limit < 0 || l < limit)) limit = l;
      }
      m = within_cgroup(m, limit, read_number(dir + "/memory.current"),
                        stat_field(dir + "/memory.stat", "inactive_file"), group);
    } else if (controllers.find(",memory,") != std::string::npos) {  // v1
      const std::string dir = "/sys/fs/cgroup/memory" + (group == "/" ? "" : group);
      m = within_cgroup(m, stat_field(dir + "/memory.stat", "hierarchical_memory_limit"),
                        read_number(dir + "/memory.usage_in_bytes"),
                        stat_field(dir + "/memory.stat", "total_inactive_file"), group);
    }
  }
  return m;
}

MemoryFacts parse_meminfo(std::istream& in) {
  MemoryFacts m;
  std::string key, unit;
  double kb = 0;
  while (in >> key >> kb) {
    std::getline(in, unit);
    if (key == "MemTotal:") m.total = kb * 1024;
    if (key == "MemAvailable:") m.available = kb * 1024;
  }
  return m;
}

std::string nvidia_release(const std::string& line) {
  const auto at = line.find("Module");
  if (at == std::string::npos) return "";
  std::istringstream words(line.substr(at + 6));
  std::string release;
  words >> release;
  return release;
}

bool relevant_env(const std::string& name) {
  for (const char* exact : {"CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS"})
    if (name == exact) return true;
  for (const char* prefix : {"NCCL_", "UCX_", "MERIDIAN_"})
    if (name.rfind(prefix, 0) == 0) return true;
  if (name.rfind("OMPI_MCA_", 0) != 0) return false;  // OMPI_COMM_WORLD_RANK etc.: the launcher's
  for (const char* launcher :
       {"OMPI_MCA_orte_", "OMPI_MCA_prte_", "OMPI_MCA_ess", "OMPI_MCA_pmix", "OMPI_MCA_initial_wdir",
        "OMPI_MCA_shmem_RUNTIME_QUERY_hint", "OMPI_MCA_mpi_oversubscribe",
        // set by mpirun on the other nodes' daemons, not by the user
        "OMPI_MCA_plm", "OMPI_MCA_routed"})
    if (name.rfind(launcher, 0) == 0) return false;
  return true;
}

namespace {

using nlohmann::json;

// ---- Facts one rank gathers about itself.

// Free space and writability of the run directory (a file created, written and removed).
RunDirFacts run_dir_facts(const std::string& dir, int rank) {
  RunDirFacts d;
  std::error_code ec;
  const auto path = std::filesystem::absolute(dir, ec);
  d.path = ec ? dir : path.lexically_normal().string();
  if (d.path.size() > 1 && d.path.back() == '/') d.path.pop_back();  // "/tmp/." normalises to "/tmp/"
  struct statvfs vfs {};
  if (statvfs(dir.c_str(), &vfs) != 0) {
    d.error = fmt::format("statvfs: {}", std::strerror(errno));
    return d;
  }
  d.free = double(vfs.f_bavail) * double(vfs.f_frsize);
  const std::string probe = dir + "/.meridian-doctor-rank" + std::to_string(rank);
  {
    std::ofstream out(probe);
    if (!(out << "meridian doctor write test\n") || !(out.flush())) {
      d.error = fmt::format("cannot write a file there: {}", std::strerror(errno));
    }
  }
  std::filesystem::remove(probe, ec);
  return d;
}

ShmFacts shm_facts() {
  ShmFacts s;
  struct statvfs vfs {};
  if (statvfs("/dev/shm", &vfs) != 0) {
    s.error = fmt::format("/dev/shm: {}", std::strerror(errno));
    return s;
  }
  s.total = double(vfs.f_blocks) * double(vfs.f_frsize);
  s.free = double(vfs.f_bavail) * double(vfs.f_frsize);
  return s;
}

// The NVIDIA kernel driver's release ("550.54.15"), from the file its module provides; "" without one.
std::string nvidia_driver_release() {
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  std::getline(in, line);
  return nvidia_release(line);
}

std::map<std::string, std::string> env_facts() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq != std::string::npos && relevant_env(kv.substr(0, eq))) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

// The IPv4 addresses `host` resolves to here; empty with `error` set when it does not resolve.
std::vector<std::string> resolve(const std::string& host, std::string* error) {
  std::vector<std::string> addresses;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0) {
    *error = gai_strerror(rc);
    return addresses;
  }
  for (addrinfo* p = res; p; p = p->ai_next) {
    char text[INET_ADDRSTRLEN] = {0};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(p->ai_addr)->sin_addr, text, sizeof(text));
    if (std::find(addresses.begin(), addresses.end(), text) == addresses.end()) addresses.push_back(text);
  }
  freeaddrinfo(res);
  return addresses;
}

// Addresses this host's name resolves to, the other nodes' names it cannot resolve, and its up,
// non-loopback IPv4 interfaces.
NetworkFacts network_facts(const std::string& host, const std::vector<std::string>& all_hosts) {
  NetworkFacts n;
  std::string error;
  n.resolves_to = resolve(host, &error);
  for (const auto& peer : std::set<std::string>(all_hosts.begin(), all_hosts.end()))
    if (peer != host && resolve(peer, &error).empty()) n.unresolved_peers.push_back(peer + " (" + error + ")");
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) == 0) {
    for (ifaddrs* i = ifs; i; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) ||
          (i->ifa_flags & IFF_LOOPBACK))
        continue;
      char text[INET_ADDRSTRLEN] = {0};
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof(text));
      n.interfaces.push_back(std::string(i->ifa_name) + " " + text);
    }
    freeifaddrs(ifs);
  }
  return n;
}

RankFacts local_facts(const comm::Runtime& rt, const std::string& run_dir, const std::vector<std::string>& hosts) {
  RankFacts f;
  f.rank = rt.rank();
  f.host = rt.host();
  f.local_rank = rt.local_rank();
  f.local_size = rt.local_size();
  f.cores = static_cast<int>(std::thread::hardware_concurrency());
  f.bound_cpus = rt.bound_cpus();
  f.threads = rt.threads();
  f.mpi_waits = rt.mpi_waits();
  f.device = rt.device().str();
  f.memory = memory_facts();
  f.run_dir = run_dir_facts(run_dir, rt.rank());
  f.shm = shm_facts();
  f.versions = version_facts();
  f.gpu = {nvidia_driver_release(), comm::local_gpus(), rt.gpu_build(), rt.gpu_build_refused()};
  f.env = env_facts();
  f.network = network_facts(rt.host(), hosts);
  const core::CpuShare cpu = core::sample_cpu_share(kCpuWindowS, rt.machine_pids(), /*list_processes=*/true);
  f.cpu = {core::boot_id(), cpu.busy_cores, cpu.others_cores, cpu.steal_pct, cpu.runnable, {}};
  for (const auto& p : cpu.others)
    f.cpu.others.push_back(fmt::format("pid {} ({}) {:.1f} cores", p.pid, p.command, p.cores));
  return f;
}

}  // namespace

VersionFacts version_facts() {
  VersionFacts v;
  v.build = fmt::format("meridian {} (git {}, {})", MERIDIAN_VERSION, MERIDIAN_GIT, MERIDIAN_BUILD_TYPE);
  v.binary = file_hash("/proc/self/exe");
  v.torch = TORCH_VERSION;
  v.mpi = comm::mpi_library_version();
  v.nccl = comm::nccl_version();
  v.cuda_build = comm::cuda_build_text();
  return v;
}
}  // namespace meridian::ops

// ---- JSON, to cross ranks: beside each type, in its own namespace, where nlohmann's lookup by argument
// finds it (comm's GPU inventory goes over the wire only here).

namespace meridian::comm {
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(GpuInfo, name, memory_bytes, major, minor)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(GpuInventory, queryable, note, driver_version, runtime_version, gpus)
}  // namespace meridian::comm

namespace meridian::ops {

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(MemoryFacts, total, available)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(RunDirFacts, path, free, error, sees_rank0_file)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ShmFacts, total, free, error)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(VersionFacts, build, binary, torch, mpi, nccl, cuda_build)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(NetworkFacts, resolves_to, interfaces, unresolved_peers)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(DataFacts, path, kind, split, created_by, format_version, count, bytes, head, error)

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(GpuFacts, driver_release, inventory, build, build_refused)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(CpuFacts, machine, busy_cores, others_cores, steal_pct, runnable, others)

// Without --data: null.
void to_json(json& j, const std::optional<DataFacts>& d) { j = d ? json(*d) : json(nullptr); }
void from_json(const json& j, std::optional<DataFacts>& d) {
  d = j.is_null() ? std::nullopt : std::optional<DataFacts>(j.get<DataFacts>());
}

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(RankFacts, rank, local_rank, local_size, host, device, cores, bound_cpus, threads,
                                   mpi_waits, memory, run_dir, shm, gpu, versions, env, network, cpu, data)

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

std::vector<RankFacts> gather_facts(const comm::Runtime& rt, const std::string& run_dir,
                                    const std::optional<DataFacts>& data) {
  // Does every rank see the run directory rank 0 sees? Rank 0 leaves a file with a token, the others read it.
  uint64_t token =
      rt.rank() == 0
          ? splitmix64(uint64_t(std::chrono::system_clock::now().time_since_epoch().count()) ^ uint64_t(getpid()))
          : 0;
  rt.broadcast_bytes(&token, sizeof(token), 0);
  const std::string token_file = run_dir + fmt::format("/.meridian-doctor-{:016x}", token);
  if (rt.rank() == 0) std::ofstream(token_file) << token << "\n";
  rt.barrier();
  uint64_t seen = 0;
  std::ifstream(token_file) >> seen;

  RankFacts mine = local_facts(rt, run_dir, rt.allgather(rt.host()));
  mine.run_dir.sees_rank0_file = seen == token;
  mine.data = data;
  std::vector<RankFacts> facts;
  for (const auto& text : rt.allgather(json(mine).dump())) facts.push_back(json::parse(text).get<RankFacts>());
  rt.barrier();  // everyone has read the token file
  if (rt.rank() == 0) {
    std::error_code ec;
    std::filesystem::remove(token_file, ec);
  }
  return facts;
}

}  // namespace meridian::ops
