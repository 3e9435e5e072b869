#include "mpi_wait.h"

#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "meridian/core/error.h"
#include "mpi_check.h"

namespace meridian::comm::detail {

namespace {
bool read_mode() {
  const char* env = std::getenv("MERIDIAN_MPI_WAIT");
  const std::string mode = env ? env : "";
  if (mode.empty() || mode == "poll") return true;
  if (mode == "block") return false;
  throw UserError("MERIDIAN_MPI_WAIT: expected block or poll, got '" + mode + "'");
}
}  // namespace

bool poll_waits() {
  static const bool poll = read_mode();
  return poll;
}

void wait_all(int count, MPI_Request* requests) {
  if (!poll_waits()) {
    MERIDIAN_MPI_CHECK(MPI_Waitall(count, requests, MPI_STATUSES_IGNORE));
    return;
  }
  // Test without pause for the first kSpinNs: a quick operation (every one on a single host, a
  // bandwidth-bound ring piece) completes as fast as under MPI_Waitall. Only a wait for a slower rank
  // goes on to sleep, from kFirstNs doubling to kLastNs between tests.
  constexpr int64_t kSpinNs = 1'000'000;
  constexpr long kFirstNs = 20'000, kLastNs = 200'000;
  static thread_local bool slack_set = false;
  if (!slack_set) {  // this thread's sleeps as asked (the default slack adds 50 us to each)
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    slack_set = true;
  }
  const auto start = std::chrono::steady_clock::now();
  long sleep_ns = 0;
  for (;;) {
    int done = 0;
    MERIDIAN_MPI_CHECK(MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE));
    if (done) return;
    if (sleep_ns == 0) {
      if (std::chrono::steady_clock::now() - start < std::chrono::nanoseconds(kSpinNs)) continue;
      sleep_ns = kFirstNs;
    }
    const timespec pause{0, sleep_ns};
    nanosleep(&pause, nullptr);
    sleep_ns = std::min(kLastNs, 2 * sleep_ns);
  }
}

namespace {
// `blocking()` (an MPI call, returning its code), or under poll_waits() `start(&request)` (its
// nonblocking form) and wait(); a failure names `call`.
template <typename Blocking, typename Start>
void run(const char* call, Blocking blocking, Start start) {
  int rc;
  if (poll_waits()) {
    MPI_Request request;
    if ((rc = start(&request)) == MPI_SUCCESS) wait(&request);
  } else {
    rc = blocking();
  }
  if (rc != MPI_SUCCESS) ::meridian::detail::throw_check_failure("MPI", call, mpi_error_string(rc), __FILE__, __LINE__);
}
}  // namespace

void allreduce(void* buffer, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  run(
      "MPI_Allreduce", [&] { return MPI_Allreduce(MPI_IN_PLACE, buffer, count, type, op, comm); },
      [&](MPI_Request* r) { return MPI_Iallreduce(MPI_IN_PLACE, buffer, count, type, op, comm, r); });
}

void allgather(const void* in, int count, MPI_Datatype type, void* out, MPI_Comm comm) {
  run(
      "MPI_Allgather", [&] { return MPI_Allgather(in, count, type, out, count, type, comm); },
      [&](MPI_Request* r) { return MPI_Iallgather(in, count, type, out, count, type, comm, r); });
}

void broadcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  run(
      "MPI_Bcast", [&] { return MPI_Bcast(buffer, count, type, root, comm); },
      [&](MPI_Request* r) { return MPI_Ibcast(buffer, count, type, root, comm, r); });
}

void reduce_scatter_block(const void* in, void* out, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  run(
      "MPI_Reduce_scatter_block", [&] { return MPI_Reduce_scatter_block(in, out, count, type, op, comm); },
      [&](MPI_Request* r) { return MPI_Ireduce_scatter_block(in, out, count, type, op, comm, r); });
}

void barrier(MPI_Comm comm) {
  run(
      "MPI_Barrier", [&] { return MPI_Barrier(comm); }, [&](MPI_Request* r) { return MPI_Ibarrier(comm, r); });
}

}  // namespace meridian::comm::detail
