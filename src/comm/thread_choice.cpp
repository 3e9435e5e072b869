#include "meridian/comm/thread_choice.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "meridian/core/cpu_usage.h"

namespace meridian::comm {

ThreadChoice choose_threads(const ThreadInputs& in) {
  ThreadChoice c;
  const int cores = std::max(1, in.cores), ranks = std::max(1, in.machine_ranks);
  // Other processes' load counts in whole cores, from half a core up: a shell or a daemon does not.
  const int busy = in.others_cores >= core::kSharedOthersCores ? static_cast<int>(std::lround(in.others_cores)) : 0;
  const int free = std::max(1, cores - busy);
  const std::string machine =
      fmt::format("{} cores on this machine{} for {} rank{} of the job{}", cores,
                  busy > 0 ? fmt::format(", {:.1f} of them busy with other processes,", in.others_cores) : "", ranks,
                  ranks == 1 ? "" : "s",
                  ranks > in.node_ranks ? " (ranks of other nodes share this machine: the same kernel boot id)" : "");
  if (in.requested > 0 || in.omp_num_threads > 0) {
    c.threads = in.requested > 0 ? in.requested : in.omp_num_threads;
    c.why = fmt::format("{} (from {}); {}", c.threads, in.requested > 0 ? "--threads" : "OMP_NUM_THREADS", machine);
  } else {
    c.threads = std::max(1, free / ranks);
    c.why = fmt::format("{}: {}", c.threads, machine);
    const int bound = std::max(1, in.bound_cpus / std::max(1, in.ranks_bound_alike));
    if (in.bound_cpus > 0 && bound < c.threads) {
      c.threads = bound;
      c.why = fmt::format("{}: bound to {} CPU{} for {} rank{}; {}", c.threads, in.bound_cpus,
                          in.bound_cpus == 1 ? "" : "s", in.ranks_bound_alike, in.ranks_bound_alike == 1 ? "" : "s",
                          machine);
    }
  }
  c.crowded = c.threads > 1 && c.threads * ranks > free;
  c.oversubscribed = ranks > free;
  if (c.crowded)
    c.why += fmt::format(
        "; {} threads x {} ranks on {} free core{}: OpenMP workers spin-wait for the time slices the working threads "
        "need (a step can take 20x longer): use --threads {}",
        c.threads, ranks, free, free == 1 ? "" : "s", std::max(1, free / ranks));
  if (c.threads == 1)
    c.why += "; no OpenMP worker threads";
  else if (in.wait_policy)
    c.why += fmt::format("; OpenMP workers wait by OMP_WAIT_POLICY={}", in.wait_policy);
  else if (in.spin_count)
    c.why += fmt::format("; OpenMP workers spin GOMP_SPINCOUNT={} times, then sleep", in.spin_count);
  else
    c.why +=
        "; OpenMP workers spin briefly, then sleep (the runtime's default: waiting passively was 10-13 % slower on "
        "cores of their own)";
  return c;
}

}  // namespace meridian::comm
