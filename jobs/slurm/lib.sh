# shellcheck shell=bash disable=SC2034,SC2317  # sourced; the trap handler and its flags are used indirectly
# Shared by jobs/slurm/*.sbatch (sourced, not run): finding meridian, building the launcher
# command (srun --mpi=pmix or mpirun inside the allocation), and running it with signals forwarded.
#
# Environment read here (all optional):
#   MERIDIAN      the meridian binary (default: <repo>/build/meridian, else `meridian` on PATH)
#   LAUNCHER      srun (default) | mpirun
#   SRUN_MPI      srun's --mpi plugin (default pmix; `srun --mpi=list` shows what this Slurm has)
#   SRUN_ARGS     extra srun options, word-split (e.g. "--cpu-bind=cores")
#   MPIRUN        the mpirun binary (default: mpirun on PATH)
#   MPIRUN_ARGS   mpirun options, word-split; replaces the default binding
#                 (--map-by slot:PE=$SLURM_CPUS_PER_TASK when --cpus-per-task is given, else --bind-to none)
#   ENV_FILE      file(s) sourced before launching, colon-separated (e.g. jobs/env/vm-tcp.sh)

msg() { echo "[meridian-slurm $(date -u +%FT%TZ)] $*" >&2; }
die() { msg "error: $*"; exit 2; }

# The checkout this file belongs to (sbatch copies the batch script into Slurm's spool directory,
# so the scripts find this file through MERIDIAN_HOME, the submitted script's path or the submit dir).
MERIDIAN_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# Where a batch script finds this file: MERIDIAN_HOME, else next to the submitted script (its path
# from `scontrol show job`), else <submit dir>/jobs/slurm. (Each .sbatch has a copy of this logic,
# since it runs before this file is sourced.)

# The meridian binary, checked: MERIDIAN, else <root>/build/meridian, else on PATH
# (root: $1, or "" for this checkout).
find_meridian() {
  local root=${1:-$MERIDIAN_ROOT} bin=${MERIDIAN:-}
  if [[ -z $bin ]]; then
    if [[ -x $root/build/meridian ]]; then bin=$root/build/meridian
    else bin=$(command -v meridian || true); fi
  fi
  [[ -n $bin ]] || die "no meridian binary: set MERIDIAN=/path/to/build/meridian (not found in $root/build or on PATH)"
  [[ -x $bin ]] || die "MERIDIAN=$bin is not an executable file (on $(hostname -s))"
  echo "$bin"
}

# Sources the ENV_FILE list (colon-separated), each checked.
source_env_files() {
  local files f
  IFS=: read -r -a files <<<"${ENV_FILE:-}"
  for f in "${files[@]}"; do
    [[ -r $f ]] || die "ENV_FILE: $f is not readable (on $(hostname -s))"
    # shellcheck source=/dev/null
    source "$f" || die "sourcing $f failed"
  done
}

# Makes a path absolute against the submit directory (ranks may start elsewhere).
abs_path() { [[ $1 == /* ]] && echo "$1" || echo "$SLURM_SUBMIT_DIR/$1"; }

# Fills the array LAUNCH with the launcher command for one rank per Slurm task.
build_launcher() {
  LAUNCH=()
  case ${LAUNCHER:-srun} in
    srun)
      command -v srun >/dev/null || die "LAUNCHER=srun but srun is not on PATH"
      # --kill-on-bad-exit: a rank that dies ends the step instead of leaving the others waiting.
      LAUNCH=(srun --mpi="${SRUN_MPI:-pmix}" --kill-on-bad-exit=1)
      # shellcheck disable=SC2206  # word splitting intended
      [[ -n ${SRUN_ARGS:-} ]] && LAUNCH+=($SRUN_ARGS)
      ;;
    mpirun)
      local mpirun=${MPIRUN:-mpirun}
      command -v "$mpirun" >/dev/null || die "LAUNCHER=mpirun but '$mpirun' is not on PATH (set MPIRUN)"
      # Inside an allocation Open MPI reads the node list and tasks per node from Slurm and starts
      # its daemons with srun; -np is the job's task count.
      LAUNCH=("$mpirun" -np "${SLURM_NTASKS:?SLURM_NTASKS is not set: give sbatch --ntasks or --ntasks-per-node}")
      if [[ -n ${MPIRUN_ARGS:-} ]]; then
        # shellcheck disable=SC2206
        LAUNCH+=($MPIRUN_ARGS)
      elif [[ -n ${SLURM_CPUS_PER_TASK:-} ]]; then
        LAUNCH+=(--map-by "slot:PE=$SLURM_CPUS_PER_TASK" --bind-to core)
      else
        LAUNCH+=(--bind-to none)  # Open MPI would bind each rank to one core when it starts 2 or fewer
      fi
      ;;
    *) die "LAUNCHER must be srun or mpirun, got '${LAUNCHER}'" ;;
  esac
}

# Prints what the job is and where it runs.
describe_job() {
  msg "job $SLURM_JOB_ID ($SLURM_JOB_NAME) restart ${SLURM_RESTART_COUNT:-0}: ${SLURM_NTASKS:-?} tasks on" \
      "${SLURM_JOB_NUM_NODES:-?} node(s) [${SLURM_JOB_NODELIST:-?}], tasks per node ${SLURM_TASKS_PER_NODE:-?}," \
      "cpus per task ${SLURM_CPUS_PER_TASK:-unset}, gpus per node ${SLURM_GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-none}}"
}

# Runs "$@" in the background and waits for it, forwarding USR1/USR2/TERM/INT from the batch shell
# (Slurm's --signal=B:USR1@T and `scancel --signal=USR1 --batch` reach only this shell; bash runs a
# trap only between commands, hence the background + wait). srun and mpirun pass the signal on to
# every rank. Sets RC to the command's exit code and GOT_TERM=1 when the shell saw SIGTERM/SIGINT
# (a cancellation or the hard time limit, as opposed to the USR1 warning).
GOT_TERM=0 GOT_USR1=0 RC=0
run_forwarding() {
  local child
  forward() {
    msg "batch shell received SIG$1: forwarding it to the launcher (pid $child)"
    [[ $1 == TERM || $1 == INT ]] && GOT_TERM=1
    [[ $1 == USR1 ]] && GOT_USR1=1
    kill -s "$1" "$child" 2>/dev/null || true
  }
  "$@" &
  child=$!
  trap 'forward USR1' USR1
  trap 'forward USR2' USR2
  trap 'forward TERM' TERM
  trap 'forward INT' INT
  while true; do
    wait "$child"
    RC=$?
    # wait returns early (status > 128) when a trapped signal arrives; go on while the child lives.
    if ((RC > 128)) && kill -0 "$child" 2>/dev/null; then continue; fi
    break
  done
  trap - USR1 USR2 TERM INT
}

# meridian's exit codes, in words.
explain_exit() {
  case $1 in
    0) echo "ok" ;;
    1) echo "a check failed (bench), or the launcher gave up (mpirun: a rank was killed or the job was cancelled)" ;;
    2) echo "bad input (the message above names the option, file or field); not retried" ;;
    3) echo "fatal: a failed or hung collective, a rank that died, a system error (see the rank logs)" ;;
    4) echo "stopped on a signal after writing a checkpoint" ;;
    *) echo "ended by the launcher or a signal (a rank killed, out of memory, the time limit)" ;;
  esac
}
