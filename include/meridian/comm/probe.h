// Probes for `meridian doctor`: point-to-point latency and bandwidth between two ranks, each rank's
// clock offset to rank 0, and the GPUs this process sees. The MPI and CUDA calls behind them live here
// because only comm/ talks to MPI and CUDA; deciding what is healthy is ops/checks.h's job.
//
// The collective probes use the world communicator on the calling (main) thread, like the Runtime's
// own helpers; they are not watched by a Watchdog (a peer that never answers blocks them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace meridian::comm {

class Runtime;

struct PairResult {
  int a = -1, b = -1;        // world ranks; a sends first and times the exchange
  uint64_t bytes = 0;        // message size, each way
  int iters = 0;             // timed round trips
  double one_way_us = 0;     // median round-trip time / 2: one message of `bytes`
  double bandwidth_gbs = 0;  // bytes / one_way (1e9 bytes per second)
};

// Collective over the world: every rank calls it with the same a, b, bytes and iters (a != b, both
// valid ranks, iters >= 1, bytes < 2 GiB; SystemError otherwise). Only a and b exchange messages: 2
// untimed round trips, then `iters` timed ones, each timed alone; the median round trip is the result
// (robust to a rank descheduled now and then). The other ranks wait for it polling, without spinning
// (they leave the CPU to a and b). Every rank returns a's measurement. Blocking; throws SystemError
// when an MPI call fails.
// delay_us is a test hook (`meridian doctor --inject-delay RANK:US`): this rank sleeps that long
// before each message it sends in the exchange, so a test can make one rank's links look slow. Each
// rank passes its own value; 0 everywhere in normal use.
PairResult ping_pong(const Runtime& runtime, int a, int b, size_t bytes, int iters, double delay_us = 0);

struct ClockOffset {
  double offset_s = 0;  // this rank's wall clock (system_clock) minus rank 0's; 0 on rank 0
  double error_s = 0;   // bound on the estimate's error: half the round trip of the sample used
};

// Collective over the world: rank 0 exchanges `samples` (>= 1) timestamp round trips with every
// other rank in turn and keeps, per rank, the one with the shortest round trip (Cristian's method:
// offset = t_remote - (t_sent + t_received) / 2). Every rank returns its own offset. Blocking;
// throws SystemError when an MPI call fails.
ClockOffset clock_offset_to_root(const Runtime& runtime, int samples = 8);

struct GpuInfo {
  std::string name;           // "NVIDIA H100 80GB HBM3"
  uint64_t memory_bytes = 0;  // total device memory
  int major = 0, minor = 0;   // compute capability
};

struct GpuInventory {
  bool queryable = false;     // this build links the CUDA runtime (built with NCCL) or a CUDA LibTorch
  std::string note;           // why no GPU is listed or details are missing; empty when all is known
  int driver_version = 0;     // CUDA version the driver supports (cudaDriverGetVersion: 12040 = 12.4); 0 unknown
  int runtime_version = 0;    // version of the CUDA runtime this process loaded; 0 unknown
  std::vector<GpuInfo> gpus;  // the devices this process sees (after CUDA_VISIBLE_DEVICES)
};

// Not collective; any thread; never throws (a failed query is described in `note`). Creates no
// CUDA context (device properties and versions only).
GpuInventory local_gpus();

// 12040 -> "12.4"; 0 -> "none".
std::string cuda_version_text(int code);

// What this build runs on CUDA with: "LibTorch's CUDA 13.2, cuDNN 9.26.0; toolkit 13.0.88 at build"
// (LibTorch's compile-time versions, the toolkit meridian's headers came from). Not collective; any
// thread; creates no CUDA context and needs no GPU.
std::string cuda_build_text();

}  // namespace meridian::comm
