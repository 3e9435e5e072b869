// `meridian bench io`: the real loader's random batches against a sequential read of the same
// number of rows of the same file, in the same run.
#pragma once

#include <cstdint>

#include "meridian/data/loader.h"

namespace meridian::data {

struct IoBenchResult {           // this rank's
  double random_per_s = 0;       // samples/s through the loader (random rows, sorted, one read per run)
  double sequential_per_s = 0;   // samples/s reading contiguous rows, the same datasets and buffers
  double wait_fraction = 0;      // time next() waited for a batch / the loop's time
  int64_t bytes_per_sample = 0;  // image + token bytes
};

// Collective (the loader opens the file on every rank; barriers before each timing). Times `steps`
// batches of `loader` (after one untimed batch), sleeping `compute_ms` per batch to stand for the
// training step, then the same number of contiguous rows in this rank's range. UserError for
// steps < 1 and whatever the loader rejects.
IoBenchResult run_io_bench(const comm::Runtime& runtime, const LoaderOptions& loader, int64_t steps, double compute_ms);

}  // namespace meridian::data
