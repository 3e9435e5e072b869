// The MPI runtime of one process: initialisation, world and node topology, device choice, threads.
//
// Exactly one Runtime exists per process (the CLI's main creates it). Construction and destruction
// are collective over MPI_COMM_WORLD. Every collective below runs under the runtime's watchdog:
// one not done within comm_timeout_s (a rank dead or cut off from the network) ends the job through
// abort_job instead of waiting forever. Every other class in comm/ takes the Runtime as a parameter;
// nothing outside comm/ includes mpi.h.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meridian/comm/device_choice.h"
#include "meridian/comm/thread_choice.h"

namespace meridian::comm {

class Watchdog;

struct RuntimeOptions {
  std::string device = "auto";  // auto (cuda:<local_rank> when CUDA is available, else cpu), cpu, cuda
  int threads = 0;              // torch intra-op threads; 0: OMP_NUM_THREADS if set, else choose_threads
  double comm_timeout_s = 600;  // watchdog: a collective not done within this ends the job
  // A GPU on the node that this build cannot run (gpu_build.h) refuses the start on every rank; false
  // (`meridian info`, `doctor`): the ranks run on the CPU and gpu_build() reports it.
  bool refuse_unusable_gpu = true;
};

class Runtime {
 public:
  // Collective. Initialises MPI with MPI_THREAD_MULTIPLE (the communicators' progress threads call
  // MPI concurrently with the main thread) and throws SystemError if the library grants less.
  // Throws UserError on every rank when any rank's device cannot be chosen (choose_device), or when
  // any rank's GPU cannot run this build (gpu_build_refusal; unless options.refuse_unusable_gpu is false).
  Runtime(int* argc, char*** argv, const RuntimeOptions& options = {});
  // Collective: MPI_Finalize.
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }  // rank among the processes on this node
  int local_size() const { return local_size_; }
  int node_count() const { return node_count_; }
  const std::string& host() const { return host_; }
  const c10::Device& device() const { return device_; }
  // Why device() is what it is: "cpu: --device auto found no CUDA device (cudaGetDeviceCount: ...)",
  // "cuda:1: local rank 1 of the node's 4 ranks, which all see the same 4 GPU(s) (...)".
  const std::string& device_why() const { return device_why_; }
  // This build against the node's GPU (gpu_build.h): "runs ...", "no NVIDIA GPU ..." or the refusal.
  const std::string& gpu_build() const { return gpu_build_; }
  bool gpu_build_refused() const { return gpu_build_refused_; }
  int threads() const { return threads_; }
  // Why threads() is what it is, and the OpenMP wait policy (choose_threads's `why`); `crowded`: more
  // threads than free cores.
  const ThreadChoice& thread_choice() const { return thread_choice_; }
  // How this process's MPI waits: "" where nothing was decided (a machine with a core per rank, Open
  // MPI's default busy-polling), else one line: the yield meridian switched on because the job's
  // ranks outnumber this machine's free cores (thread_choice().oversubscribed), the user's
  // OMPI_MCA_mpi_yield_when_idle, or why the yield could not be set. mpi_yields(): the yield is on.
  const std::string& mpi_waits() const { return mpi_waits_; }
  bool mpi_yields() const { return mpi_yields_; }
  // The processes of this job on this machine (the same kernel boot id), this one included: what a
  // measurement of other processes' CPU use leaves out (ops/health, doctor).
  const std::vector<int>& machine_pids() const { return machine_pids_; }
  // CPUs this process may run on (its affinity mask: mpirun's --bind-to, Slurm's cgroup); 0 if unknown.
  int bound_cpus() const { return bound_cpus_; }
  double comm_timeout_s() const { return options_.comm_timeout_s; }

  // Collective: every rank passes its string; rank 0 gets all of them in rank order, others get {}.
  std::vector<std::string> gather_to_root(const std::string& mine) const;
  // Collective: every rank gets every rank's string in rank order.
  std::vector<std::string> allgather(const std::string& mine) const;
  // Collective: true on every rank iff `ok` is true on every rank (pass/fail agreement).
  bool all_true(bool ok) const;
  // Collective: rank 0 calls consume(r, data) for every rank r in order, holding one rank's data at
  // a time (for results too large to gather at once); other ranks send theirs and return.
  void stream_to_root(const std::string& mine,
                      const std::function<void(int rank, const std::string& data)>& consume) const;
  // Collective integer reductions over the world.
  int64_t sum(int64_t mine) const;
  int64_t max(int64_t mine) const;
  int64_t exclusive_prefix_sum(int64_t mine) const;  // sum over lower ranks (0 on rank 0)
  // Collective: copies `bytes` bytes from root's buffer into everyone's.
  void broadcast_bytes(void* data, size_t bytes, int root) const;
  // Collective.
  void barrier() const;
  // Runs `body` (one collective or point-to-point exchange on this process's MPI communicators)
  // under the watchdog; `what` names it in the abort message. Not collective by itself.
  void watched(const std::string& what, const std::function<void()>& body) const;

 private:
  // After the thread choice: MPI's waits yield where the machine is oversubscribed (runtime.cpp).
  void yield_when_oversubscribed(const ThreadInputs& in);
  RuntimeOptions options_;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, node_count_ = 1, threads_ = 1, bound_cpus_ = 0;
  std::string host_;
  ThreadChoice thread_choice_;
  std::vector<int> machine_pids_;
  std::string mpi_waits_;
  bool mpi_yields_ = false;
  c10::Device device_{c10::kCPU};
  std::string device_why_;
  std::string gpu_build_;
  bool gpu_build_refused_ = false;
  bool owns_mpi_ = false;
  std::unique_ptr<Watchdog> watchdog_;
};

// Collective: every rank passes its (key, value) settings, e.g. its resolved config; returns when every
// rank's are rank 0's (compared by hash: one small allgather). Otherwise throws UserError on every
// rank naming `what`, the ranks and hosts that differ from rank 0, and the first differing key with both
// values (then a second allgather of the settings themselves).
void require_same_on_every_rank(const Runtime& rt, const std::string& what,
                                const std::vector<std::pair<std::string, std::string>>& settings);

// MPI library version string (MPI_Get_library_version) and standard version. Not collective.
std::string mpi_library_version();

// Ends the whole job from any rank and any thread: logs `message` as critical on this rank (stderr
// and the rank log), appends a line to $MERIDIAN_ABORT_FILE when set ("<time> rank R host H exit C:
// <first line>", for a launcher that watches the job), runs the registered abort hooks (e.g.
// ncclCommAbort), then MPI_Abort with `exit_code`. The process ends within 20 s even when a hook or
// MPI_Abort blocks (a launcher that cannot reach a node). When this rank's parent is mpirun or an
// orted, a detached watcher ends that launcher if it is still running $MERIDIAN_LAUNCHER_GRACE_S
// (default 30, 0: never) seconds later, so that a plain `mpirun` returns after a partition.
// Safe to call before MPI is initialised.
[[noreturn]] void abort_job(const std::string& message, int exit_code);

// Registers a hook that abort_job runs before MPI_Abort (returns an id for remove_abort_hook).
int add_abort_hook(std::function<void()> hook);
void remove_abort_hook(int id);

}  // namespace meridian::comm
