// Private to comm/: the process that launched this rank, as seen from abort_job.
#pragma once

namespace meridian::comm::detail {

// After MPI_Abort, Open MPI's mpirun tells every daemon to kill its ranks and waits until each has
// answered. A daemon on a node it cannot reach (a partition, a VM that died) never answers, so a plain
// `mpirun ... meridian train` never returns although every rank has ended.
//
// When this rank's parent is such a launcher (mpirun/mpiexec/orterun/prterun on the node where the
// job was started, orted/prted on the others), starts a detached watcher process (its own session, no
// file of this rank kept open) that, `grace_s` seconds later, finds the same launcher still running,
// says so on the launcher's stderr and ends it (SIGKILL). It exits within a second when the launcher
// ends by itself. No effect under other launchers (srun's slurmstepd, a shell) or
// when grace_s <= 0. Not collective; called once, from abort_job, on every rank that aborts.
// `rank` and `reason` only make the message.
void end_launcher_later(int grace_s, int rank, const char* reason);

}  // namespace meridian::comm::detail
