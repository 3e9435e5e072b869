// `meridian bench ckpt`: collective checkpoint write and read-back time against a plain sequential
// write and read of the same bytes in the same directory, in the same run.
#pragma once

#include <cstdint>
#include <string>

namespace meridian::comm {
class Runtime;
}

namespace meridian::ckpt {

struct CkptBenchOptions {
  int64_t bytes = 256ll << 20;  // float32 state, split into `tensors` tensors of rows of 1024
  int tensors = 32;
  std::string dir = "/tmp/meridian-bench-ckpt";  // the checkpoint directory's file system
  int repeat = 2;                                // the best of `repeat` is reported
};

struct CkptBenchResult {
  double bytes = 0;  // written per checkpoint
  // Best seconds: the collective write (checksums and fsync included: the training stall), the read
  // and verification of everything by every rank (as resume reads), and rank 0's plain write + fsync
  // and read of the same bytes.
  double write_s = 0, read_s = 0, plain_write_s = 0, plain_read_s = 0;
  double seal_s = 0;  // of the best write: its whole-file checksum (the slowest rank's share)
};

// Collective. UserError for options out of range (tensors or repeat < 1, under 4 KiB per tensor).
// The plain figures are rank 0's (0 elsewhere). Leaves nothing behind in options.dir.
CkptBenchResult run_ckpt_bench(const comm::Runtime& runtime, const CkptBenchOptions& options);

}  // namespace meridian::ckpt
