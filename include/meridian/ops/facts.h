// What `meridian doctor` finds out about a job before judging it (ops/checks.h): the facts each rank
// gathers about its machine (cores, memory, run directory, /dev/shm, GPUs, versions, environment, host
// name and interfaces, the dataset's fingerprint), and what the ranks measure together
// (ops/network_check.h: point-to-point links, an allreduce, clock offsets). Plain values: the checks
// can be fed fabricated ones. They cross ranks as JSON, inside gather_facts only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <istream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "meridian/comm/probe.h"

namespace meridian::comm {
class Runtime;
}

namespace meridian::ops {

struct MemoryFacts {
  double total = -1, available = -1;  // bytes, from /proc/meminfo; -1 when unreadable
  std::string limit;  // "" or the cgroup whose memory limit lowered them ("cgroup memory limit of /slurm/uid_0/job_7")
};
// Not collective: this process's memory now: /proc/meminfo (parse_meminfo), lowered to its cgroup's
// limit where it has one (cgroup v2 memory.max of its group and their parents, or v1's
// hierarchical_memory_limit: a Slurm job's or a container's memory), less what the group holds
// but its inactive page cache.
MemoryFacts memory_facts();
// `host` lowered to a cgroup limit of `limit` bytes (<= 0 or beyond the host: no limit) holding `usage`
// bytes of which `inactive_file` is reclaimable page cache; `group` names it in `limit`.
MemoryFacts within_cgroup(MemoryFacts host, double limit, double usage, double inactive_file, const std::string& group);
// MemTotal and MemAvailable of a /proc/meminfo text ("MemTotal:  16384 kB" lines) in bytes; -1 for
// each one missing.
MemoryFacts parse_meminfo(std::istream& meminfo);

// Not collective: whether this CPU computes bfloat16 natively (avx512_bf16 or amx_bf16 in
// /proc/cpuinfo); without, autocast to bfloat16 still works, only slowly.
bool cpu_has_native_bf16();
// Whether the first "flags" line of a /proc/cpuinfo text lists avx512_bf16 or amx_bf16.
bool cpuinfo_has_native_bf16(std::istream& cpuinfo);

// The NVIDIA kernel module's release in the first line of /proc/driver/nvidia/version ("NVRM version:
// NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar ..." -> "550.54.15"); "" when it names none.
std::string nvidia_release(const std::string& version_line);

// Whether an environment variable changes how MPI, UCX, NCCL or meridian behave, so that doctor
// compares it across ranks: NCCL_*, UCX_*, MERIDIAN_*, CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS and the
// user's OMPI_MCA_* (not those the launcher sets for its own use: OMPI_MCA_orte_*, ..._plm, ...).
bool relevant_env(const std::string& name);

// The run directory (--run-dir): where checkpoints and logs go.
struct RunDirFacts {
  std::string path;              // absolute and normalised ("/tmp", not "/tmp/.")
  double free = 0;               // bytes available to this user; 0 when statvfs failed
  std::string error;             // why it cannot be used (statvfs failed, a file cannot be written); empty: usable
  bool sees_rank0_file = false;  // this rank read the file rank 0 wrote there: the same directory
};

struct ShmFacts {
  double total = 0, free = 0;  // bytes of /dev/shm
  std::string error;           // statvfs failed; empty otherwise
};

struct GpuFacts {
  std::string driver_release;    // the NVIDIA kernel module's ("550.54.15"); empty without one
  comm::GpuInventory inventory;  // what this process sees through the CUDA runtime
  std::string build;             // this build against the node's GPU (comm::Runtime::gpu_build())
  bool build_refused = false;    // ... a refusal: the build cannot run there
};

struct VersionFacts {
  std::string build;       // "meridian 0.1.0 (git abc123, Release)"
  std::string binary;      // FNV-1a of the executable, 16 hex digits
  std::string torch;       // LibTorch's version
  std::string mpi;         // the MPI library's version string
  std::string nccl;        // NCCL's version, or why there is none
  std::string cuda_build;  // comm::cuda_build_text(): LibTorch's CUDA and cuDNN, the toolkit at build
};

struct NetworkFacts {
  std::vector<std::string> resolves_to;  // IPv4 addresses the host name resolves to
  std::vector<std::string> interfaces;   // up, non-loopback IPv4 interfaces: "eth0 198.18.0.1"
  // The other nodes' host names this one cannot resolve: "node-b (Name or service not known)".
  std::vector<std::string> unresolved_peers;
};

// A dataset's fingerprint: its format summary and a hash of its first kDataHeadBytes.
struct DataFacts {
  std::string path, kind, split, created_by;
  int64_t format_version = 0, count = 0;
  uint64_t bytes = 0;  // file size
  std::string head;    // file_hash(path, kDataHeadBytes)
  std::string error;   // why it is not a valid dataset; empty when it is (the other fields are then set)
};
constexpr size_t kDataHeadBytes = 1 << 20;

// Who shares this rank's CPUs, over doctor's window of kCpuWindowS (core::CpuShare) while every rank sleeps.
constexpr double kCpuWindowS = 0.5;
struct CpuFacts {
  std::string machine;              // the kernel's boot id: nodes that print the same share one machine
  double busy_cores = 0;            // every process
  double others_cores = 0;          // processes outside the job
  double steal_pct = 0;             // the hypervisor ran other VMs on this VM's vCPUs
  double runnable = 0;              // mean runnable threads (this rank's sampler included)
  std::vector<std::string> others;  // the busiest other processes: "pid 812 (stress) 1.0 cores"
};

struct RankFacts {
  int rank = 0, local_rank = 0, local_size = 1;
  std::string host;
  std::string device;  // "cpu", "cuda:0"
  int cores = 0;       // hardware threads of the node
  int bound_cpus = 0;  // CPUs this rank is bound to
  int threads = 0;     // torch intra-op threads
  std::string
      mpi_waits;  // comm::Runtime::mpi_waits(): "" or how its MPI waits (the yield on an oversubscribed machine)
  MemoryFacts memory;
  RunDirFacts run_dir;
  ShmFacts shm;
  GpuFacts gpu;
  VersionFacts versions;
  std::map<std::string, std::string>
      env;  // NCCL_*, UCX_*, MERIDIAN_*, OMPI_MCA_* (not the launcher's), CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS
  NetworkFacts network;
  CpuFacts cpu;
  std::optional<DataFacts> data;  // with doctor --data only
};

// One measured pair of ranks (ops::measure_links): small messages for latency, large ones for bandwidth.
struct LinkFacts {
  comm::PairResult latency, bandwidth;
};

// The allreduce training uses, measured on its backend (ops::measure_allreduce).
struct AllreduceFacts {
  int ranks = 1;        // 1: nothing measured (nothing to reduce)
  std::string backend;  // "mpi", "nccl"
  uint64_t bytes = 0;   // float32 message
  double busbw_gbs = 0, time_us = 0;
  int64_t wrong = 0;  // elements that differ from the closed-form sum, over all ranks
};

// This process's build and libraries (meridian, LibTorch, MPI, NCCL, CUDA). Not collective.
VersionFacts version_facts();

// FNV-1a of the file's first `limit` bytes as 16 hex digits; "unreadable" when it cannot be opened.
// Not collective; never throws for I/O errors.
std::string file_hash(const std::string& path, size_t limit = SIZE_MAX);

// Collective over the world: every rank calls it with the same run_dir. Checks whether every rank
// sees the run directory rank 0 sees (rank 0 writes a file with a random token there, the others
// read it; removed afterwards), gathers this rank's facts (this rank's `data`, as the caller
// fingerprinted it: the data area is not below ops) and allgathers them. Returns every rank's facts
// on every rank, indexed by rank. Main thread; throws SystemError when an MPI call fails.
std::vector<RankFacts> gather_facts(const comm::Runtime& runtime, const std::string& run_dir,
                                    const std::optional<DataFacts>& data);

}  // namespace meridian::ops
