// `meridian bench comm`: collective bandwidth sweep in the manner of nccl-tests.
//
// For each collective, dtype and size it times `iters` back-to-back async operations (or blocking
// calls, with `blocking`) after `warmup`,
// reports the slowest rank's mean time, algbw = bytes / time and busbw (the bandwidth a link must
// sustain, comparable across rank counts, as nccl-tests defines it):
//   allreduce       busbw = algbw * 2(n-1)/n
//   allgather       busbw = algbw * (n-1)/n      (bytes = the gathered output)
//   reduce_scatter  busbw = algbw * (n-1)/n      (bytes = the full input)
//   broadcast       busbw = algbw
// It then runs each size once more on fresh data whose expected result is closed-form in rank and
// size, and counts the wrong elements summed over ranks (so every rank agrees on pass/fail). The
// reference columns time the plain MPI collective (one call, no segmentation) on the same buffer
// (for a GPU communicator, a host copy of it).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "meridian/comm/communicator.h"

namespace meridian::comm {

struct CommBenchOptions {
  uint64_t min_bytes = 8;
  uint64_t max_bytes = 256ull << 20;
  double factor = 2.0;
  std::vector<std::string> collectives{"allreduce"};  // allreduce, broadcast, allgather, reduce_scatter
  std::vector<std::string> dtypes{"float32"};         // float32, float64, bfloat16, float16, int32, int64
  ReduceOp op = ReduceOp::Sum;
  int warmup = 3;
  int iters = 10;
  bool reference = true;  // time raw MPI as well
  bool blocking = false;  // time blocking calls one by one instead of back-to-back async operations
};

struct CommBenchRow {
  std::string collective, dtype, op;
  uint64_t bytes = 0, count = 0;  // count: elements per rank's input (allreduce/broadcast: of the buffer)
  double time_us = 0, algbw_gbs = 0, busbw_gbs = 0;
  int64_t wrong = 0;                            // summed over ranks
  double ref_time_us = -1, ref_busbw_gbs = -1;  // -1: not measured
};

// Throws UserError on bad options (unknown collective or dtype, min > max, factor <= 1, avg on integers).
void validate(const CommBenchOptions& options);

// Collective: every rank calls it with the same options. Returns the same rows on every rank.
// `on_row` (may be empty) is called on every rank as each row completes, for live printing.
std::vector<CommBenchRow> run_comm_bench(const Runtime& runtime, Communicator& comm, const CommBenchOptions& options,
                                         const std::function<void(const CommBenchRow&)>& on_row = {});

// busbw factor for `collective` on n ranks (see above).
double bus_factor(const std::string& collective, int n);

}  // namespace meridian::comm
