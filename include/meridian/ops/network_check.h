// `meridian doctor`'s network measurements, made by all ranks together: point-to-point ping-pongs
// between pairs of ranks, the allreduce training uses, and each rank's clock offset to rank 0
// (comm/probe.h, comm/bench.h underneath). ops/checks.h judges the results.
//
// Every function here is collective over the world: every rank calls it, in the same order, with the
// same arguments (delay_us excepted), on the main thread. The ping-pongs and the clock exchange run
// outside any communicator, so each is watched by a Watchdog of its own: one not done within the
// Runtime's comm_timeout_s ends the job (abort_job, exit code kExitFatal) with a message naming the
// ranks and hosts that could not exchange messages, instead of a hang. Throws SystemError when an MPI
// call fails.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "meridian/ops/facts.h"

namespace meridian::ops {

// Measures the links between representatives: local rank 0 of each node when the job spans nodes,
// every rank on a single node. Every pair up to 32 pairs, else a ring plus each to the one half-way
// round. Per pair: latency with 8-byte messages (50 round trips), bandwidth with `bytes` (`iters`
// round trips, >= 1; bytes < 2 GiB). delay_us: this rank's test delay (`doctor --inject-delay`), 0
// normally. Returns the same measurements on every rank; empty when there is no pair (one rank).
std::vector<LinkFacts> measure_links(const comm::Runtime& runtime, const std::vector<RankFacts>& facts, uint64_t bytes,
                                     int iters, double delay_us);

// Not collective, no MPI: the pairs measure_links measures, in its order, each as (lower rank, higher
// rank). The representatives are local rank 0 of each node when node_count > 1, else every rank (in
// the order of `facts`); every pair of them while that is at most 32 pairs, else each to the next
// round a ring and each to the one half-way round, every pair once. Empty for one representative.
std::vector<std::pair<int, int>> link_pairs(const std::vector<RankFacts>& facts, int node_count);

// A float32 allreduce of `bytes` on the default backend (2 warm-up, `iters` timed), its result checked
// against the closed form. Returns the same result on every rank; on a single rank nothing is measured
// (ranks == 1). The backend's own communicator and watchdog cover it.
AllreduceFacts measure_allreduce(const comm::Runtime& runtime, uint64_t bytes, int iters);

// Every rank's wall-clock offset to rank 0 (comm::clock_offset_to_root). Returns them indexed by rank
// on rank 0, empty elsewhere; empty everywhere on a single rank (nothing exchanged).
std::vector<comm::ClockOffset> measure_clock_offsets(const comm::Runtime& runtime);

}  // namespace meridian::ops
