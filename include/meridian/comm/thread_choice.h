// How many intra-op threads a rank runs (thread_choice.cpp): a pure function of what the Runtime
// measures at start-up, so that its rules are tested without MPI (tests/comm/threads_test.cpp).
#pragma once

#include <string>

namespace meridian::comm {

// What a rank's intra-op thread count is chosen from (Runtime measures it; choose_threads is pure).
struct ThreadInputs {
  int requested = 0;                  // --threads; 0: not given
  int omp_num_threads = 0;            // OMP_NUM_THREADS; 0: unset
  int cores = 1;                      // CPUs online on this machine
  int machine_ranks = 1;              // the job's ranks on this machine: the same kernel boot id, whatever "node" MPI
                                      // counts them on (network namespaces, containers: a virtual cluster)
  int node_ranks = 1;                 // of those, on this rank's node as MPI counts it (local_size)
  int bound_cpus = 0;                 // CPUs this rank is bound to (its affinity mask); 0: unknown
  int ranks_bound_alike = 1;          // the node's ranks bound to the very same CPUs (they split them)
  double others_cores = -1;           // CPUs kept busy by processes outside the job (sampled); < 0: not measured
  const char* wait_policy = nullptr;  // OMP_WAIT_POLICY, GOMP_SPINCOUNT as set in the environment, or null
  const char* spin_count = nullptr;
};
struct ThreadChoice {
  int threads = 1;
  std::string why;       // "1 per rank: 2 cores on this machine for 2 ranks of the job (...); ..."
  bool crowded = false;  // more threads than free cores: OpenMP workers spin for time slices (warn)
  // More ranks of the job on this machine than free cores: a rank waiting in MPI (Open MPI's progress
  // loop, MPI-IO's collective file access) must give its core to the ranks that compute
  // (Runtime makes MPI's waits yield there).
  bool oversubscribed = false;
};
// The intra-op threads of a rank. The user's choice wins (--threads, then OMP_NUM_THREADS). Else the
// machine's free cores (cores minus those other processes keep busy, counted when at least half busy)
// split over the job's ranks on the machine, no more than the CPUs the rank is bound to split over the
// ranks bound alike, and at least 1. More threads than free cores is what makes a shared CPU cost 20x
// its share: OpenMP workers spin-wait at every parallel region for time slices the working threads need
// (docs/performance.md). `why` also names the OpenMP wait policy in force. Not collective.
ThreadChoice choose_threads(const ThreadInputs& in);

}  // namespace meridian::comm
