// For libraries that take an MPI communicator themselves (parallel HDF5's MPI-IO driver). The one
// place outside src/comm/ where mpi.h is reachable; everything else goes through Runtime and
// Communicator.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace meridian::comm {

class Runtime;

// Collective over the world: a duplicate of MPI_COMM_WORLD for one library's exclusive use (so its
// collectives never interleave with ours). Free it with free_comm (collective).
MPI_Comm duplicate_world(const Runtime& runtime);
void free_comm(MPI_Comm& comm);

// Collective over `comm` (a duplicate of the world): every rank gets every rank's string in rank
// order, under the runtime's watchdog. Thread-safe in the MPI sense: a background thread may call
// it on its own duplicate while the main thread uses the world.
std::vector<std::string> allgather_strings(const Runtime& runtime, MPI_Comm comm, const std::string& mine);

// A duplicate of the world owned by one user (a background checkpoint writer): created and freed
// collectively, on the main thread.
class OwnComm {
 public:
  explicit OwnComm(const Runtime& runtime) : comm_(duplicate_world(runtime)) {}
  ~OwnComm() { free_comm(comm_); }
  OwnComm(const OwnComm&) = delete;
  OwnComm& operator=(const OwnComm&) = delete;
  MPI_Comm get() const { return comm_; }

 private:
  MPI_Comm comm_;
};

}  // namespace meridian::comm
