#include "meridian/comm/runtime.h"

#include <ATen/Parallel.h>
#include <c10/cuda/CUDAFunctions.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <mpi.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "launcher.h"
#include "meridian/comm/gpu_build.h"
#include "meridian/comm/mpi_interop.h"
#include "meridian/comm/probe.h"
#include "meridian/comm/watchdog.h"
#include "meridian/core/cpu_usage.h"
#include "meridian/core/error.h"
#include "meridian/core/hash.h"
#include "meridian/core/log.h"
#include "mpi_check.h"
#include "work.h"

namespace meridian::comm {

Runtime::Runtime(int* argc, char*** argv, const RuntimeOptions& options) : options_(options) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    // Open MPI's TCP transport carries data both ways at full rate only over two connections per
    // pair of processes: with its default of one, every exchange between 2 nodes (a ring step, an
    // allgather) ran at half the link rate each way (virtual cluster, 1 Gbit/s: 0.064 against
    // 0.12 GB/s). Read by every process at MPI_Init; a value the user set is kept.
    setenv("OMPI_MCA_btl_tcp_links", "2", /*overwrite=*/0);
    MERIDIAN_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    owns_mpi_ = true;
  } else {
    MERIDIAN_MPI_CHECK(MPI_Query_thread(&provided));
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MERIDIAN_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  MERIDIAN_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  set_process_identity(rank_, size_);
  host_ = process_identity().host;
  detail::append_launcher_line("MERIDIAN_STARTED_FILE", "started");  // the launch worked (jobs/mpirun-restart.sh)
  watchdog_ =
      std::make_unique<Watchdog>(options_.comm_timeout_s, detail::watchdog_abort("MPI world", options_.comm_timeout_s));
  if (provided < MPI_THREAD_MULTIPLE) {
    throw SystemError(where() + " MPI granted thread level " + std::to_string(provided) +
                      " but meridian needs MPI_THREAD_MULTIPLE (" + std::to_string(MPI_THREAD_MULTIPLE) +
                      "): the communicators' progress threads call MPI concurrently. Use an MPI built with "
                      "thread support (Debian's Open MPI is).");
  }

  MPI_Comm node_comm;
  watched("MPI_Comm_split_type (node topology)", [&] {
    MERIDIAN_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_comm));
  });
  MERIDIAN_MPI_CHECK(MPI_Comm_rank(node_comm, &local_rank_));
  MERIDIAN_MPI_CHECK(MPI_Comm_size(node_comm, &local_size_));
  // CPUs this rank may run on (mpirun binding, Slurm cgroups) and how many local ranks share the
  // very same set: those split it between them.
  cpu_set_t mask;
  CPU_ZERO(&mask);
  const int allowed = sched_getaffinity(0, sizeof(mask), &mask) == 0 ? CPU_COUNT(&mask) : 0;
  bound_cpus_ = allowed;
  std::vector<cpu_set_t> masks(local_size_);
  watched("allgather of CPU masks (node topology)", [&] {
    MERIDIAN_MPI_CHECK(MPI_Allgather(&mask, sizeof(mask), MPI_BYTE, masks.data(), sizeof(mask), MPI_BYTE, node_comm));
  });
  int sharing = 0;
  for (auto& m : masks) sharing += CPU_EQUAL(&m, &mask) ? 1 : 0;
  // Each local rank's CUDA_VISIBLE_DEVICES: whether the node's ranks share their GPUs or each has its own.
  struct VisibleEnv {
    char set;
    char value[255];
  };
  VisibleEnv env{};
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) {
    env.set = 1;
    std::snprintf(env.value, sizeof env.value, "%s", v);
  }
  std::vector<VisibleEnv> envs(local_size_);
  watched("allgather of CUDA_VISIBLE_DEVICES (node topology)", [&] {
    MERIDIAN_MPI_CHECK(MPI_Allgather(&env, sizeof env, MPI_BYTE, envs.data(), sizeof env, MPI_BYTE, node_comm));
  });
  MPI_Comm_free(&node_comm);
  int leader = local_rank_ == 0 ? 1 : 0;
  watched("allreduce of node leaders (node topology)",
          [&] { MERIDIAN_MPI_CHECK(MPI_Allreduce(&leader, &node_count_, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD)); });

  // Device. The choice is local (GPUs per node differ between nodes) but the verdict is collective,
  // so every rank throws and finalises together instead of leaving others in a later collective.
  DeviceInputs din;
  din.requested = options_.device;
  // --device cpu never touches CUDA (no driver query, no context): a CPU run starts as fast as it can.
  din.visible = options_.device == "cpu" ? 0 : static_cast<int>(torch::cuda::device_count());
  din.local_rank = local_rank_;
  din.local_size = local_size_;
  for (const auto& e : envs)
    din.visible_env.push_back(e.set ? std::optional<std::string>(std::string(e.value, strnlen(e.value, sizeof e.value)))
                                    : std::nullopt);
  din.host = host_;
  if (options_.device != "cpu" && din.visible == 0) {
    const GpuInventory inv = local_gpus();
    din.no_gpus = inv.note.empty() ? "CUDA driver " + cuda_version_text(inv.driver_version) + ", 0 devices" : inv.note;
  }
  DeviceChoice choice = choose_device(din);
  // Whether this build runs on the node's GPU, before any kernel: also where the CUDA runtime cannot
  // start (a driver older than the build's CUDA), so auto never trains on the CPU of a GPU node.
  // CUDA_VISIBLE_DEVICES='' hides the GPUs on purpose: nothing to judge then.
  if (options_.device != "cpu" && !(env.set && env.value[0] == '\0')) {
    const auto [verdict, refused] = gpu_build_verdict(choice.cuda_index, host_);
    gpu_build_ = verdict;
    gpu_build_refused_ = refused;
    if (refused && options_.refuse_unusable_gpu) {
      choice.error = verdict;
    } else if (refused) {
      choice.cuda_index = -1;
      choice.why = "cpu: " + verdict;
    }
  }
  device_why_ = choice.why;
  if (choice.error.empty() && choice.cuda_index >= 0) {
    device_ = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(choice.cuda_index));
    c10::cuda::set_device(device_.index());  // the process's current device: torch's "cuda" means this GPU
  }
  if (!all_true(choice.error.empty())) {
    const std::string message =
        choice.error.empty() ? "--device: device selection failed on another rank (see its message)" : choice.error;
    if (owns_mpi_) MPI_Finalize();
    throw UserError(message);
  }

  // The machine: ranks that share this kernel (its boot id) share its cores, whatever node MPI counts
  // them on (each network namespace of a virtual cluster, each container, is a node of its own to MPI).
  struct Peer {
    char boot[48];
    int pid;
  };
  Peer me{};
  std::string boot = core::boot_id();
  if (boot.empty()) boot = host_;
  std::snprintf(me.boot, sizeof me.boot, "%s", boot.c_str());
  me.pid = static_cast<int>(getpid());
  std::vector<Peer> peers(size_);
  watched("allgather of kernel boot ids (machine topology)", [&] {
    MERIDIAN_MPI_CHECK(MPI_Allgather(&me, sizeof me, MPI_BYTE, peers.data(), sizeof me, MPI_BYTE, MPI_COMM_WORLD));
  });
  std::vector<bool> same_machine(size_);
  for (int r = 0; r < size_; ++r)
    if ((same_machine[r] = std::strncmp(peers[r].boot, me.boot, sizeof me.boot) == 0))
      machine_pids_.push_back(peers[r].pid);

  // Threads (choose_threads). Where more than one would run, sample what other processes keep busy
  // (every rank of the machine over the same 0.15 s; the busiest reading counts for all of them).
  ThreadInputs in;
  in.requested = options_.threads;
  in.omp_num_threads = detail::env_int("OMP_NUM_THREADS", 0);
  in.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  in.machine_ranks = static_cast<int>(machine_pids_.size());
  in.node_ranks = local_size_;
  in.bound_cpus = allowed;
  in.ranks_bound_alike = sharing;
  in.wait_policy = std::getenv("OMP_WAIT_POLICY");
  in.spin_count = std::getenv("GOMP_SPINCOUNT");
  const bool sample = in.requested == 0 && in.omp_num_threads == 0 && choose_threads(in).threads > 1;
  double others = sample ? core::sample_cpu_share(0.15, machine_pids_).others_cores : -1;
  std::vector<double> all_others(size_);
  watched("allgather of CPU use by other processes (thread choice)", [&] {
    MERIDIAN_MPI_CHECK(MPI_Allgather(&others, 1, MPI_DOUBLE, all_others.data(), 1, MPI_DOUBLE, MPI_COMM_WORLD));
  });
  for (int r = 0; r < size_; ++r)
    if (same_machine[r]) others = std::max(others, all_others[r]);
  in.others_cores = others;
  thread_choice_ = choose_threads(in);
  threads_ = thread_choice_.threads;
  at::set_num_threads(threads_);
  yield_when_oversubscribed(in);
}

// Open MPI busy-polls in every wait (its progress loop, and with it MPI-IO's collective file access,
// which meridian's own backing-off waits do not cover) unless mpi_yield_when_idle is on, which it
// switches on by itself only where mpirun counts more ranks than slots. Ranks of a virtual cluster,
// or of VMs with fewer vCPUs than ranks, then spin on the cores the computing ranks need: a tiny
// model's checkpoint took 16 s instead of 0.2 s at 3 ranks on 2 cores. There the yield is switched
// on in this process, after MPI_Init (the machine's ranks are known only then), through Open MPI's
// own switch (opal_progress_set_yield_when_idle, looked up at run time); a value the user set is kept.
void Runtime::yield_when_oversubscribed(const ThreadInputs& in) {
  const std::string where =
      fmt::format("{} ranks of the job on this machine's {} cores", in.machine_ranks, std::max(1, in.cores));
  if (const char* set = std::getenv("OMPI_MCA_mpi_yield_when_idle"); set && *set) {
    const std::string v = set;  // Open MPI's booleans: 0, f, false, disabled, no, n are off
    mpi_yields_ = !(v == "0" || v == "f" || v == "false" || v == "disabled" || v == "no" || v == "n");
    mpi_waits_ = fmt::format("MPI waits: OMPI_MCA_mpi_yield_when_idle={} (the environment's; {})", set, where);
    return;
  }
  if (!thread_choice_.oversubscribed) return;
  using Switch = bool (*)(bool);
  const auto set_yield = reinterpret_cast<Switch>(dlsym(RTLD_DEFAULT, "opal_progress_set_yield_when_idle"));
  if (!set_yield) {
    mpi_waits_ = fmt::format(
        "MPI waits busy-poll with {} (this MPI has no opal_progress_set_yield_when_idle): launch with "
        "--mca mpi_yield_when_idle 1, or start fewer ranks",
        where);
    return;
  }
  set_yield(true);
  mpi_yields_ = true;
  mpi_waits_ = fmt::format(
      "MPI waits yield the core (Open MPI's mpi_yield_when_idle, switched on by meridian): {} (oversubscribed)", where);
}

Runtime::~Runtime() {
  watchdog_.reset();
  if (!owns_mpi_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void Runtime::watched(const std::string& what, const std::function<void()>& body) const {
  const uint64_t id = watchdog_->begin(what);
  try {
    body();
  } catch (...) {
    watchdog_->end(id);  // a failed call is reported by its exception, not later by the watchdog
    throw;
  }
  watchdog_->end(id);
}

std::vector<std::string> Runtime::gather_to_root(const std::string& mine) const {
  const int len = static_cast<int>(mine.size());
  std::vector<int> lens(rank_ == 0 ? size_ : 0), offsets;
  std::string all;
  watched("gather of strings to rank 0", [&] {
    MERIDIAN_MPI_CHECK(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD));
    if (rank_ == 0) {
      int total = 0;
      for (int l : lens) offsets.push_back(total), total += l;
      all.resize(total);
    }
    MERIDIAN_MPI_CHECK(
        MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR, 0, MPI_COMM_WORLD));
  });
  std::vector<std::string> out;
  for (int r = 0; r < static_cast<int>(lens.size()); ++r) out.push_back(all.substr(offsets[r], lens[r]));
  return out;
}

std::vector<std::string> Runtime::allgather(const std::string& mine) const {
  return allgather_strings(*this, MPI_COMM_WORLD, mine);
}

bool Runtime::all_true(bool ok) const {
  int mine = ok ? 1 : 0, all = 0;
  watched("allreduce(min) of a pass/fail verdict",
          [&] { MERIDIAN_MPI_CHECK(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD)); });
  return all == 1;
}

void Runtime::broadcast_bytes(void* data, size_t bytes, int root) const {
  MERIDIAN_CHECK(bytes <= static_cast<size_t>(INT32_MAX), "broadcast_bytes: message too large");
  watched("broadcast of " + std::to_string(bytes) + " bytes from rank " + std::to_string(root),
          [&] { MERIDIAN_MPI_CHECK(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD)); });
}

void Runtime::barrier() const {
  watched("barrier", [&] { MERIDIAN_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD)); });
}

void Runtime::stream_to_root(const std::string& mine,
                             const std::function<void(int rank, const std::string& data)>& consume) const {
  if (rank_ != 0) {
    watched("send of " + std::to_string(mine.size()) + " bytes to rank 0", [&] {
      uint64_t len = mine.size();
      MERIDIAN_MPI_CHECK(MPI_Send(&len, 1, MPI_UINT64_T, 0, 7001, MPI_COMM_WORLD));
      for (uint64_t off = 0; off < len; off += INT32_MAX) {
        const int n = static_cast<int>(std::min<uint64_t>(INT32_MAX, len - off));
        MERIDIAN_MPI_CHECK(MPI_Send(mine.data() + off, n, MPI_CHAR, 0, 7002, MPI_COMM_WORLD));
      }
    });
    return;
  }
  consume(0, mine);
  std::string buffer;
  for (int r = 1; r < size_; ++r) {
    watched("receive from rank " + std::to_string(r), [&] {
      uint64_t len = 0;
      MERIDIAN_MPI_CHECK(MPI_Recv(&len, 1, MPI_UINT64_T, r, 7001, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
      buffer.resize(len);
      for (uint64_t off = 0; off < len; off += INT32_MAX) {
        const int n = static_cast<int>(std::min<uint64_t>(INT32_MAX, len - off));
        MERIDIAN_MPI_CHECK(MPI_Recv(buffer.data() + off, n, MPI_CHAR, r, 7002, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
      }
    });
    consume(r, buffer);
  }
}

int64_t Runtime::sum(int64_t mine) const {
  int64_t all = 0;
  watched("allreduce(sum) of an integer",
          [&] { MERIDIAN_MPI_CHECK(MPI_Allreduce(&mine, &all, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD)); });
  return all;
}

int64_t Runtime::exclusive_prefix_sum(int64_t mine) const {
  int64_t before = 0;
  watched("exscan(sum) of an integer",
          [&] { MERIDIAN_MPI_CHECK(MPI_Exscan(&mine, &before, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD)); });
  return rank_ == 0 ? 0 : before;
}

int64_t Runtime::max(int64_t mine) const {
  int64_t all = 0;
  watched("allreduce(max) of an integer",
          [&] { MERIDIAN_MPI_CHECK(MPI_Allreduce(&mine, &all, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD)); });
  return all;
}

MPI_Comm duplicate_world(const Runtime& runtime) {
  MPI_Comm comm;
  runtime.watched("MPI_Comm_dup of the world", [&] { MERIDIAN_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm)); });
  return comm;
}

std::vector<std::string> allgather_strings(const Runtime& runtime, MPI_Comm comm, const std::string& mine) {
  const int len = static_cast<int>(mine.size());
  std::vector<int> lens(size_t(runtime.size())), offsets;
  std::string all;
  runtime.watched("allgather of strings", [&] {
    MERIDIAN_MPI_CHECK(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm));
    int total = 0;
    for (int l : lens) offsets.push_back(total), total += l;
    all.assign(total, '\0');
    MERIDIAN_MPI_CHECK(
        MPI_Allgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR, comm));
  });
  std::vector<std::string> out;
  for (int r = 0; r < runtime.size(); ++r) out.push_back(all.substr(offsets[r], lens[r]));
  return out;
}

void free_comm(MPI_Comm& comm) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  comm = MPI_COMM_NULL;
}

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string s(text, len);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0' || s.back() == ' ')) s.pop_back();
  if (auto nl = s.find(','); nl != std::string::npos) s = s.substr(0, nl);  // "Open MPI v4.1.4, package: ..."
  int major = 0, minor = 0;
  MPI_Get_version(&major, &minor);
  return s + " (MPI " + std::to_string(major) + "." + std::to_string(minor) + ")";
}

void require_same_on_every_rank(const Runtime& rt, const std::string& what,
                                const std::vector<std::pair<std::string, std::string>>& settings) {
  const std::map<std::string, std::string> mine(settings.begin(), settings.end());
  std::string text;  // canonical: sorted by key, one "key\tvalue\n" each
  for (const auto& [k, v] : mine) text += k + "\t" + v + "\n";
  const auto hashes = rt.allgather(std::to_string(fnv1a(text.data(), text.size())) + " " + rt.host());
  auto hash_of = [&](int r) { return hashes[r].substr(0, hashes[r].find(' ')); };
  auto host_of = [&](int r) { return hashes[r].substr(hashes[r].find(' ') + 1); };
  std::vector<int> differ;
  for (int r = 1; r < rt.size(); ++r)
    if (hash_of(r) != hash_of(0)) differ.push_back(r);
  if (differ.empty()) return;
  const auto texts = rt.allgather(text);
  auto parse = [](const std::string& t) {
    std::map<std::string, std::string> m;
    for (size_t pos = 0, end; (end = t.find('\n', pos)) != std::string::npos; pos = end + 1) {
      const auto tab = t.find('\t', pos);
      m[t.substr(pos, tab - pos)] = t.substr(tab + 1, end - tab - 1);
    }
    return m;
  };
  const int first = differ.front();
  const auto a = parse(texts[0]), b = parse(texts[first]);
  std::string key;  // the first key (in order) whose value differs or that only one of them has
  for (auto ia = a.begin(), ib = b.begin(); ia != a.end() || ib != b.end();) {
    if (ib == b.end() || (ia != a.end() && ia->first < ib->first)) {
      key = ia->first;
      break;
    }
    if (ia == a.end() || ib->first < ia->first) {
      key = ib->first;
      break;
    }
    if (ia->second != ib->second) {
      key = ia->first;
      break;
    }
    ++ia, ++ib;
  }
  auto value = [&](const std::map<std::string, std::string>& m) {
    const auto it = m.find(key);
    return it == m.end() ? std::string("(not set)") : "'" + it->second + "'";
  };
  std::string ranks;
  for (size_t i = 0; i < differ.size() && i < 8; ++i)
    ranks += (i ? ", " : "") + std::to_string(differ[i]) + " on " + host_of(differ[i]);
  if (differ.size() > 8) ranks += " and " + std::to_string(differ.size() - 8) + " more";
  throw UserError(what + " differs between ranks: rank" + (differ.size() > 1 ? "s " : " ") + ranks + " differ" +
                  (differ.size() > 1 ? "" : "s") + " from rank 0 on " + host_of(0) + ", first at '" + key +
                  "': " + value(b) + " on rank " + std::to_string(first) + " vs " + value(a) +
                  " on rank 0 (every rank must run the same command and config)");
}

}  // namespace meridian::comm
