// For libraries that take an MPI communicator themselves (parallel HDF5's MPI-IO driver). The one
// place outside src/comm/ where mpi.h is reachable; everything else goes through Runtime and
// Communicator.
#pragma once

#include <mpi.h>

namespace meridian::comm {

class Runtime;

// Collective over the world: a duplicate of MPI_COMM_WORLD for one library's exclusive use (so its
// collectives never interleave with ours). Free it with free_comm (collective).
MPI_Comm duplicate_world(const Runtime& runtime);
void free_comm(MPI_Comm& comm);

}  // namespace meridian::comm
