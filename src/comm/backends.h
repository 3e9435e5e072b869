// Private to comm/: backend constructors and the raw-MPI reference used by the benchmark.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "meridian/comm/communicator.h"

namespace meridian::comm::detail {

struct MpiOptions {
  size_t segment_bytes = 0;  // 0: default (kDefaultSegmentBytes or MERIDIAN_MPI_SEGMENT_BYTES)
  // Sums of at least this many bytes go around the ring (mpi_ring.h); default kDefaultRingBytes or
  // MERIDIAN_MPI_RING_BYTES; SIZE_MAX: never.
  std::optional<size_t> ring_bytes;
};

std::unique_ptr<Communicator> make_mpi_communicator(const Runtime& runtime, const MpiOptions& options);
std::unique_ptr<Communicator> make_nccl_communicator(const Runtime& runtime);

// Calls the plain MPI collective on MPI_COMM_WORLD (one call, no segmentation) on host tensors:
// the reference the benchmark compares against. Collective; blocking; main thread.
void raw_mpi_collective(const std::string& collective, at::Tensor& input, at::Tensor& output, ReduceOp op);

}  // namespace meridian::comm::detail
