# shellcheck shell=bash
# Sourced by the Slurm tests (slurm_test.sh: one node; slurm_nodes_test.sh: the virtual cluster):
# what both clusters share. The caller keeps a `pids` array of the daemons it started and a fail().

# Nothing from an enclosing Slurm job or MPI launch may leak into the test's jobs.
slurm_clean_env() {
  local v
  while read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(SLURM_|SBATCH_|SRUN_|SALLOC_|PMIX_|PMI_|OMPI_COMM_WORLD)')
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
}

# slurm_start_munge DIR [PREFIX...]: a munged with its own key and socket (DIR/munge/socket; an
# installed munge is not touched), its pid added to `pids`; then a credential made and read back
# (under PREFIX, e.g. `vc_exec 3`: from another node's namespace). fail() when it does not answer.
slurm_start_munge() {
  local dir=$1 key=$1/munge/munge.key
  shift
  chmod 755 "$dir"  # munged insists that everyone can reach its socket's directory
  mkdir -p "$dir/munge" && chmod 755 "$dir/munge"
  if command -v mungekey >/dev/null; then mungekey --create --keyfile="$key" || fail "mungekey exited $?"
  else dd if=/dev/urandom of="$key" bs=1024 count=1 status=none; fi
  chmod 600 "$key"
  munged --foreground --force --socket="$dir/munge/socket" --key-file="$key" --pid-file="$dir/munge/pid" \
    --seed-file="$dir/munge/seed" --log-file="$dir/munged.log" >"$dir/munged.stderr" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 50); do [[ -S $dir/munge/socket ]] && break; sleep 0.1; done
  "$@" sh -c "munge -n -S '$dir/munge/socket' | unmunge -S '$dir/munge/socket'" >/dev/null ||
    fail "munged does not answer${1:+ (from $*)}"
}

# slurm_stop_daemons MARKER: the daemons in `pids`, newest first (the slurmds, slurmctld, munged),
# each killed 10 s after SIGTERM at the latest; then the job steps (slurmstepd and their tasks) that
# outlived their slurmd, found by MARKER in their command line or environment.
slurm_stop_daemons() {
  local i p
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill "${pids[i]}" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "${pids[i]}" 2>/dev/null || break; sleep 0.2; done
    kill -9 "${pids[i]}" 2>/dev/null
  done
  for p in $(pgrep -f "slurmstepd|$1" 2>/dev/null); do
    [[ $p != "$$" ]] && grep -qs "$1" "/proc/$p/cmdline" "/proc/$p/environ" && kill -9 "$p" 2>/dev/null
  done
}

# slurm_common_conf DIR [MIN_JOB_AGE]: the slurm.conf lines both clusters use: munge auth through DIR's
# socket, root daemons, state and slurmctld files in DIR, no cgroup/accounting plugins, cores as the
# unit, requeue allowed, nodes back in service by themselves. MIN_JOB_AGE (default 600 s): how long a
# finished job's record stays; `sbatch --wait` polls every 2 s only when it is 4 s or less (else after
# 2, 8, then 32 s: a job of 11 s took 42 s to be seen done).
slurm_common_conf() {
  cat <<CONF
AuthType=auth/munge
CredType=cred/munge
# cred_expire: also how long a requeued job waits before it may start again (default 120 s)
AuthInfo=socket=$1/munge/socket,cred_expire=10
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$1/state
SlurmctldPidFile=$1/slurmctld.pid
SlurmctldLogFile=$1/slurmctld.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=1
MinJobAge=${2:-600}
InactiveLimit=0
CONF
}
