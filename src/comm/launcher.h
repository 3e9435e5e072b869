// Private to comm/: the process that launched this rank, as seen from abort_job.
#pragma once

#include <string>

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

// Appends "<time> rank R host H <what>\n" to the file named by $`variable` (nothing when unset), in one
// write so that lines from several ranks don't mix (MERIDIAN_STARTED_FILE, MERIDIAN_ABORT_FILE, for
// jobs/mpirun-restart.sh). abort.cpp. Not collective.
void append_launcher_line(const char* variable, const std::string& what);

// $name as an integer in [min, 1000000], else `fallback`.
int env_int(const char* name, int fallback, long min = 1);

}  // namespace meridian::comm::detail
