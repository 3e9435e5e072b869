// Private to comm/: ring collectives over MPI point-to-point messages, for large floating-point sums.
//
// Why: Open MPI 4.1's tuned MPI_Allreduce and MPI_Reduce_scatter_block do not reach the link rate
// over TCP. Measured on the virtual cluster (tests/cluster/vcluster.sh) with links limited to
// 1 Gbit/s, which carry 0.12 GB/s each way at once: MPI_Allreduce of 4-16 MB reaches a bus
// bandwidth of 0.063 GB/s on 2 nodes and 0.037 GB/s on 3 nodes, whatever segment size. A ring
// (reduce-scatter, then allgather; each rank sends only to its right neighbour and receives only
// from its left one, 2 (n-1)/n of the bytes in all) reaches the link rate on any number of nodes.
// Each step's chunk moves in pieces, and a piece is added in as soon as it arrives, so the sum
// overlaps the transfer of the next piece. Tensors beyond 16 pieces per rank (16 MiB) go around in
// several rings (blocks), so the scratch memory stays at 16 MiB (allreduce) or 32 MiB
// (reduce-scatter) whatever the size.
//
// Results: every rank ends with the same bits (each chunk is summed once, on one rank, in ring order,
// then copied); the order of the additions depends only on the rank count, never on where the
// ranks run, so a job gives the same result on one host and across nodes.
//
// Not thread-safe: the MPI communicator's operations run one at a time (its exec lock).
// Collective over `comm`: every rank calls the same function with the same count and type.
#pragma once

#include <c10/core/ScalarType.h>
#include <mpi.h>

#include <cstdint>
#include <vector>

namespace meridian::comm::detail {

class MpiRing {
 public:
  // piece_bytes: the unit of transfer and of summation (rounded down to whole elements).
  MpiRing(MPI_Comm comm, int rank, int size, size_t piece_bytes);

  // In place: `data` (count elements) becomes the sum over ranks. Precondition: has_sum_kernel(type).
  void allreduce(void* data, int64_t count, at::ScalarType type);

  // `in` holds size * count elements; `out` (count elements, not overlapping `in`) becomes the sum
  // over ranks of their in[rank * count, (rank + 1) * count).
  void reduce_scatter(const void* in, void* out, int64_t count, at::ScalarType type);

 private:
  // Sends `send_bytes` from `send` to the right neighbour while receiving `recv_bytes` from the left
  // one into `recv`, both in pieces; after each received piece calls on_piece(offset, bytes).
  void allreduce_block(char* data, int64_t count, at::ScalarType type);  // one ring over `data`
  template <typename OnPiece>
  void exchange(const char* send, int64_t send_bytes, char* recv, int64_t recv_bytes, int64_t piece, OnPiece on_piece);
  char* scratch(size_t bytes);
  int64_t block_bytes() const {
    return int64_t(piece_bytes_) * 16;
  }  // one ring's share per rank  // at least `bytes`, kept between calls

  MPI_Comm comm_;
  int rank_, size_, left_, right_;
  size_t piece_bytes_;
  std::vector<char> scratch_;
  std::vector<MPI_Request> requests_;
};

}  // namespace meridian::comm::detail
