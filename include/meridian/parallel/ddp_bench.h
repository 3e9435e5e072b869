// `meridian bench ddp`: a synthetic MLP trained with DistributedDataParallel, reduction overlapped
// with backward and after it, in the same run, against the same ranks training without communication.
#pragma once

#include <cstdint>
#include <string>

namespace meridian::comm {
class Runtime;
}

namespace meridian::parallel {

struct DdpBenchOptions {
  double params = 16e6;  // model size: `depth` square Linear layers of width sqrt(params / depth)
  int depth = 8;
  int64_t batch = 32;  // samples per rank per step
  int steps = 10;      // timed, after `warmup` untimed ones
  int warmup = 2;
  double bucket_mb = 25;
  bool bf16_communication = false;
  std::string trace_path;  // a Chrome trace of the overlapped steps (all ranks), written by rank 0; "": none
};

struct DdpBenchResult {
  int64_t parameters = 0, width = 0, buckets = 0;
  double gradient_bytes = 0;  // communicated per step
  // The slowest rank's mean seconds per step: alone (no communication), with the reduction
  // overlapping backward, and after backward; the communication wait finish() exposed with overlap,
  // and the whole reduction after backward.
  double alone_s = 0, overlapped_s = 0, after_s = 0, exposed_s = 0, reduction_s = 0;
};

// Collective: every rank calls it with the same options; the same result on every rank. UserError
// for depth, batch or steps < 1 or warmup < 0.
DdpBenchResult run_ddp_bench(const comm::Runtime& runtime, const DdpBenchOptions& options);

}  // namespace meridian::parallel
