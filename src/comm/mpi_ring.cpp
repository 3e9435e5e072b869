#include "mpi_ring.h"

#include <algorithm>
#include <cstring>

#include "mpi_check.h"
#include "mpi_wait.h"
#include "reduce_kernels.h"

namespace meridian::comm::detail {

namespace {
constexpr int kRingTag = 0x5249;  // point-to-point tag of ring messages ("RI")
}  // namespace

MpiRing::MpiRing(MPI_Comm comm, int rank, int size, size_t piece_bytes)
    : comm_(comm),
      rank_(rank),
      size_(size),
      left_((rank + size - 1) % size),
      right_((rank + 1) % size),
      piece_bytes_(std::clamp<size_t>(piece_bytes, 64, size_t(1) << 30)) {}

char* MpiRing::scratch(size_t bytes) {
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  return scratch_.data();
}

template <typename OnPiece>
void MpiRing::exchange(const char* send, int64_t send_bytes, char* recv, int64_t recv_bytes, int64_t piece,
                       OnPiece on_piece) {
  const auto pieces = [&](int64_t bytes) { return bytes == 0 ? 0 : (bytes + piece - 1) / piece; };
  const int64_t nrecv = pieces(recv_bytes), nsend = pieces(send_bytes);
  requests_.assign(size_t(nrecv + nsend), MPI_REQUEST_NULL);
  for (int64_t i = 0; i < nrecv; ++i) {
    const int n = int(std::min(piece, recv_bytes - i * piece));
    MERIDIAN_MPI_CHECK(MPI_Irecv(recv + i * piece, n, MPI_BYTE, left_, kRingTag, comm_, &requests_[i]));
  }
  for (int64_t i = 0; i < nsend; ++i) {
    const int n = int(std::min(piece, send_bytes - i * piece));
    MERIDIAN_MPI_CHECK(
        MPI_Isend(send + i * piece, n, MPI_BYTE, right_, kRingTag, comm_, &requests_[size_t(nrecv + i)]));
  }
  for (int64_t i = 0; i < nrecv; ++i) {  // in order: messages between two ranks arrive in order
    wait(&requests_[i]);
    on_piece(i * piece, std::min(piece, recv_bytes - i * piece));
  }
  wait_all(int(nsend), requests_.data() + nrecv);
}

void MpiRing::allreduce(void* data, int64_t count, at::ScalarType type) {
  const int n = size_;
  if (n == 1 || count == 0) return;
  const int64_t elem = int64_t(c10::elementSize(type));
  // Rings of at most n blocks each, so the scratch buffer stays at one block.
  const int64_t block = std::max<int64_t>(1, block_bytes() / elem) * n;
  for (int64_t off = 0; off < count; off += block)
    allreduce_block(static_cast<char*>(data) + off * elem, std::min(block, count - off), type);
}

void MpiRing::allreduce_block(char* base, int64_t count, at::ScalarType type) {
  const int n = size_;
  const int64_t elem = int64_t(c10::elementSize(type));
  const int64_t piece = std::max<int64_t>(1, int64_t(piece_bytes_) / elem) * elem;
  // Chunk c: elements [count * c / n, count * (c + 1) / n); some may be empty when count < n.
  const auto begin = [&](int c) { return count * c / n * elem; };
  const auto bytes = [&](int c) { return begin(c + 1) - begin(c); };
  const auto mod = [n](int x) { return ((x % n) + n) % n; };
  char* incoming = scratch(size_t((count / n + 1) * elem));
  // Reduce-scatter: at step s send chunk r-s-1, receive chunk r-s-2 and add it in; after n-1 steps
  // chunk r holds the sum of every rank's.
  for (int s = 0; s < n - 1; ++s) {
    const int out = mod(rank_ - s - 1), in = mod(rank_ - s - 2);
    char* dst = base + begin(in);
    exchange(base + begin(out), bytes(out), incoming, bytes(in), piece,
             [&](int64_t off, int64_t len) { sum_into(type, dst + off, incoming + off, len / elem); });
  }
  // Allgather: at step s send chunk r-s (complete), receive chunk r-s-1 in place.
  for (int s = 0; s < n - 1; ++s) {
    const int out = mod(rank_ - s), in = mod(rank_ - s - 1);
    exchange(base + begin(out), bytes(out), base + begin(in), bytes(in), piece, [](int64_t, int64_t) {});
  }
}

void MpiRing::reduce_scatter(const void* in, void* out, int64_t count, at::ScalarType type) {
  const int n = size_;
  const int64_t elem = int64_t(c10::elementSize(type));
  const char* input = static_cast<const char*>(in);
  char* output = static_cast<char*>(out);
  if (n == 1 || count == 0) {
    if (count > 0) std::memcpy(output, input, size_t(count * elem));
    return;
  }
  const int64_t piece = std::max<int64_t>(1, int64_t(piece_bytes_) / elem) * elem;
  const auto mod = [n](int x) { return ((x % n) + n) % n; };
  // Column blocks of every rank's slice, one ring each, so the two scratch buffers stay at one
  // block whatever the size.
  const int64_t block = std::max<int64_t>(1, block_bytes() / elem);
  for (int64_t first = 0; first < count; first += block) {
    const int64_t len = std::min(block, count - first), bytes = len * elem;
    const auto slice = [&](int c) { return input + (c * count + first) * elem; };  // rank c's part
    // Partial sums travel in two buffers: step s receives into one while sending the other (step
    // s-1's); the last step receives into `out`. Step s: send the partial of slice r-s-1 (step 0:
    // my input), receive the partial of slice r-s-2 and add my input's part to it.
    char* buffers = scratch(size_t(2 * bytes));
    const char* sending = slice(mod(rank_ - 1));
    for (int s = 0; s < n - 1; ++s) {
      char* receiving = s == n - 2 ? output + first * elem : buffers + (s % 2) * bytes;
      const char* mine = slice(mod(rank_ - s - 2));
      exchange(sending, bytes, receiving, bytes, piece,
               [&](int64_t off, int64_t n_bytes) { sum_into(type, receiving + off, mine + off, n_bytes / elem); });
      sending = receiving;
    }
  }
}

}  // namespace meridian::comm::detail
