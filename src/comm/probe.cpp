#include "meridian/comm/probe.h"

#include <ATen/detail/CUDAHooksInterface.h>
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <limits>
#include <thread>
#include <vector>

#include "meridian/build_config.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/core/stats.h"
#include "mpi_check.h"

namespace meridian::comm {

namespace {

// Tags apart from the Runtime's (7001, 7002), so a probe's messages never match another helper's.
constexpr int kTagPing = 7101;
constexpr int kTagClock = 7102;

using Clock = std::chrono::steady_clock;

void sleep_us(double us) {
  if (us > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(us));
}

// Completes `request` polling every 100 us instead of spinning inside MPI, so that ranks waiting for a
// probe leave the CPU to the ranks being measured (several ranks per core on a test machine).
void wait_quietly(MPI_Request& request) {
  for (;;) {
    int done = 0;
    MERIDIAN_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

int64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

PairResult ping_pong(const Runtime& runtime, int a, int b, size_t bytes, int iters, double delay_us) {
  const int n = runtime.size();
  MERIDIAN_CHECK(a != b && a >= 0 && b >= 0 && a < n && b < n, "ping_pong: a and b must be two different ranks");
  MERIDIAN_CHECK(iters >= 1 && bytes <= static_cast<size_t>(INT_MAX), "ping_pong: need iters >= 1 and bytes < 2 GiB");
  constexpr int kWarmup = 2;
  PairResult result;
  result.a = a;
  result.b = b;
  result.bytes = bytes;
  result.iters = iters;
  double measured[2] = {0, 0};  // one_way_us, bandwidth_gbs: a's measurement, broadcast to every rank
  const int me = runtime.rank();
  if (me == a || me == b) {
    std::vector<char> buffer(std::max<size_t>(bytes, 1), static_cast<char>(me));
    const int peer = me == a ? b : a;
    const int count = static_cast<int>(bytes);
    auto send = [&] {
      sleep_us(delay_us);
      MERIDIAN_MPI_CHECK(MPI_Send(buffer.data(), count, MPI_BYTE, peer, kTagPing, MPI_COMM_WORLD));
    };
    auto receive = [&] {
      MERIDIAN_MPI_CHECK(MPI_Recv(buffer.data(), count, MPI_BYTE, peer, kTagPing, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    };
    std::vector<double> round_trips;
    for (int i = 0; i < kWarmup + iters; ++i) {
      const auto start = Clock::now();
      if (me == a) {
        send();
        receive();
      } else {
        receive();
        send();
      }
      if (i >= kWarmup) round_trips.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
    if (me == a) {
      const double one_way = median(round_trips) / 2;
      measured[0] = one_way * 1e6;
      measured[1] = one_way > 0 ? double(bytes) / one_way / 1e9 : 0;
    }
  }
  MPI_Request request;
  MERIDIAN_MPI_CHECK(MPI_Ibcast(measured, 2, MPI_DOUBLE, a, MPI_COMM_WORLD, &request));
  wait_quietly(request);
  result.one_way_us = measured[0];
  result.bandwidth_gbs = measured[1];
  return result;
}

ClockOffset clock_offset_to_root(const Runtime& runtime, int samples) {
  MERIDIAN_CHECK(samples >= 1, "clock_offset_to_root: need samples >= 1");
  const int n = runtime.size();
  // Per rank: offset and error in seconds, filled on rank 0 and scattered.
  std::vector<double> table(runtime.rank() == 0 ? 2 * n : 0, 0.0);
  if (runtime.rank() == 0) {
    for (int r = 1; r < n; ++r) {
      double best_rtt = std::numeric_limits<double>::infinity();
      for (int s = 0; s < samples; ++s) {
        int64_t remote = 0;
        const int64_t sent = wall_ns();
        MERIDIAN_MPI_CHECK(MPI_Send(&sent, 1, MPI_INT64_T, r, kTagClock, MPI_COMM_WORLD));
        MERIDIAN_MPI_CHECK(MPI_Recv(&remote, 1, MPI_INT64_T, r, kTagClock, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        const int64_t received = wall_ns();
        const double rtt = double(received - sent) * 1e-9;
        if (rtt < best_rtt) {
          best_rtt = rtt;
          // Midpoint in integer nanoseconds: epoch times in seconds as doubles lose sub-microsecond digits.
          table[2 * r] = double(remote - (sent + (received - sent) / 2)) * 1e-9;
          table[2 * r + 1] = rtt / 2;
        }
      }
    }
  } else {
    for (int s = 0; s < samples; ++s) {
      int64_t stamp = 0;
      if (s == 0) {  // rank 0 may be busy with lower ranks for a while: wait without spinning
        MPI_Request request;
        MERIDIAN_MPI_CHECK(MPI_Irecv(&stamp, 1, MPI_INT64_T, 0, kTagClock, MPI_COMM_WORLD, &request));
        wait_quietly(request);
      } else {
        MERIDIAN_MPI_CHECK(MPI_Recv(&stamp, 1, MPI_INT64_T, 0, kTagClock, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
      }
      stamp = wall_ns();
      MERIDIAN_MPI_CHECK(MPI_Send(&stamp, 1, MPI_INT64_T, 0, kTagClock, MPI_COMM_WORLD));
    }
  }
  double mine[2] = {0, 0};
  MERIDIAN_MPI_CHECK(MPI_Scatter(table.data(), 2, MPI_DOUBLE, mine, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD));
  return ClockOffset{mine[0], mine[1]};
}

std::string cuda_build_text() {
  const auto& hooks = at::detail::getCUDAHooks();
  const long cudnn = hooks.versionCuDNN();  // major*10000 + minor*100 + patch (cuDNN >= 9)
  return "LibTorch's CUDA " + cuda_version_text(int(hooks.versionCUDART())) + ", cuDNN " +
         std::to_string(cudnn / 10000) + "." + std::to_string(cudnn / 100 % 100) + "." + std::to_string(cudnn % 100) +
         "; toolkit " + MERIDIAN_CUDA_VERSION + " at build";
}

std::string cuda_version_text(int code) {
  if (code <= 0) return "none";
  return std::to_string(code / 1000) + "." + std::to_string((code % 1000) / 10);
}

GpuInventory local_gpus() {
  GpuInventory inv;
  // The CUDA runtime (LibTorch's): versions and properties, no context.
  inv.queryable = true;
  cudaDriverGetVersion(&inv.driver_version);  // 0 when no driver is installed
  cudaRuntimeGetVersion(&inv.runtime_version);
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    inv.note = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(rc);
    cudaGetLastError();  // reset the last-error state, so later CUDA calls do not report this one
    return inv;
  }
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    GpuInfo gpu;
    if (cudaGetDeviceProperties(&prop, d) == cudaSuccess) {
      gpu.name = prop.name;
      gpu.memory_bytes = prop.totalGlobalMem;
      gpu.major = prop.major;
      gpu.minor = prop.minor;
    } else {
      gpu.name = "unknown";
      inv.note = "cudaGetDeviceProperties failed for device " + std::to_string(d);
      cudaGetLastError();
    }
    inv.gpus.push_back(gpu);
  }
  return inv;
}

}  // namespace meridian::comm
