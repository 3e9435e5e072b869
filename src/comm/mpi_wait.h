// Private to comm/: how the MPI backend waits for its operations. Open MPI's blocking calls and
// MPI_Wait spin in its progress loop (mpi_yield_when_idle only adds sched_yield), so a rank that
// waits for a slower one keeps a core busy. Where cores are shared (two ranks or a neighbour on one
// core, a CPU quota) that spinning takes the time the other side, or this rank's own next step,
// needs. So by default (MERIDIAN_MPI_WAIT=poll) every wait of the MPI backend is a nonblocking
// operation tested in a loop: without pause for 1 ms, then with sleeps between tests (from 20 us, doubling to 200 us),
// so that a rank waiting for a slower one leaves its core to others. The price, once a wait passes
// 1 ms: up to 200 us per round of the operation (Open MPI advances a nonblocking collective a round
// per test), here and at the ranks that wait for this one. Every rank must use the same mode (the
// communicator checks): a nonblocking collective never matches a blocking one.
// MERIDIAN_MPI_WAIT=block keeps MPI's blocking calls (dedicated cores: no sleep after 1 ms).
#pragma once

#include <mpi.h>

namespace meridian::comm::detail {

// From MERIDIAN_MPI_WAIT, read once ("poll", the default when unset or empty, or "block"; UserError
// naming the variable otherwise).
bool poll_waits();

// Completes the requests: MPI_Waitall, or the sleeping test loop under poll_waits().
void wait_all(int count, MPI_Request* requests);
inline void wait(MPI_Request* request) { wait_all(1, request); }

// The blocking collectives the backend uses, each as its nonblocking form plus wait() under
// poll_waits(), else the blocking call. Same arguments and errors as MPI's.
void allreduce(void* buffer, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm);
void allgather(const void* in, int count, MPI_Datatype type, void* out, MPI_Comm comm);
void broadcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm);
void reduce_scatter_block(const void* in, void* out, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm);
void barrier(MPI_Comm comm);

}  // namespace meridian::comm::detail
