#!/usr/bin/env bash
# meridian training on an ad-hoc cluster (VMs or machines reached over SSH, no scheduler): starts
# one rank per GPU (or per CPU socket) on every host of an Open MPI hostfile with mpirun, under
# jobs/mpirun-restart.sh (a failed run is relaunched with --resume auto), always with --resume auto,
# so running the same command again continues the run. docs/running.md walks through the setup.
#
# Usage: jobs/mpirun/train.sh --hostfile FILE [options] -- --config CFG.yaml --data /shared/train.h5 [--set k=v ...]
#   --hostfile FILE       | HOSTFILE        Open MPI hostfile (jobs/mpirun/hostfile.example) (required)
#   --ranks-per-node N    | RANKS_PER_NODE  ranks on every host (its GPU count); default: each host's slots=
#   --env FILE            | ENV_FILE        sourced first, e.g. jobs/env/vm-tcp.sh (network settings);
#                                           repeatable (ENV_FILE: a colon-separated list); their
#                                           NCCL_*, UCX_*, MERIDIAN_*, OMP_*, TORCH_*, HDF5_* variables are
#                                           passed to every rank (-x), OMPI_* ones by Open MPI itself
#   --run-dir DIR         | RUN_DIR         run directory on storage every host sees (default runs/<date>-<time>)
#   --max-restarts N      | MAX_RESTARTS    relaunches after a failure (default 3; 0: none)
#   --backoff S1,S2,...   | BACKOFF         pauses before the relaunches (default 10,30,60; the last repeats)
#   --doctor              | DOCTOR=1        run `meridian doctor` under the same mpirun first; stop on a FAIL
#   --dry-run                               print the commands, run nothing
#   MERIDIAN   the meridian binary, same path on every host (default: <this checkout>/build/meridian)
#   MPIRUN     mpirun (default: mpirun on PATH); MPIRUN_ARGS: extra mpirun options, word-split
#              (the default binding is --bind-to none: each rank then uses cores/ranks threads)
#   everything after --, and EXTRA_ARGS (word-split), goes to `meridian train`; CONFIG / DATA may
#   also come from the environment.
# Exit codes: those of meridian (0 done, 2 bad input, 3 fatal, 4 stopped on a signal after a
# checkpoint: run the same command again to continue), after jobs/mpirun-restart.sh's retries.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
die() { echo "train.sh: $*" >&2; exit 2; }

dry=0
extra=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --hostfile) HOSTFILE=${2:?--hostfile needs a file}; shift 2 ;;
    --ranks-per-node) RANKS_PER_NODE=${2:?--ranks-per-node needs a number}; shift 2 ;;
    --env) ENV_FILE=${ENV_FILE:+$ENV_FILE:}${2:?--env needs a file}; shift 2 ;;
    --run-dir) RUN_DIR=${2:?--run-dir needs a directory}; shift 2 ;;
    --max-restarts) MAX_RESTARTS=${2:?--max-restarts needs a number}; shift 2 ;;
    --backoff) BACKOFF=${2:?--backoff needs seconds, e.g. 10,30,60}; shift 2 ;;
    --doctor) DOCTOR=1; shift ;;
    --dry-run) dry=1; shift ;;
    -h | --help) sed -n '2,29p' "$0"; exit 0 ;;
    --) shift; extra+=("$@"); break ;;
    *) die "unknown option '$1' (meridian's own options go after --; see --help)" ;;
  esac
done
# --config / --data / --run-dir / --resume given after -- are taken apart so the checks below see them.
rest=()
for ((i = 0; i < ${#extra[@]}; i++)); do
  case ${extra[i]} in
    --config) CONFIG=${extra[i + 1]:-}; ((i++)) ;;
    --config=*) CONFIG=${extra[i]#*=} ;;
    --data) DATA=${extra[i + 1]:-}; ((i++)) ;;
    --data=*) DATA=${extra[i]#*=} ;;
    --run-dir) RUN_DIR=${extra[i + 1]:-}; ((i++)) ;;
    --run-dir=*) RUN_DIR=${extra[i]#*=} ;;
    --resume | --resume=*) die "--resume is always 'auto' here (the run directory's newest valid checkpoint)" ;;
    *) rest+=("${extra[i]}") ;;
  esac
done
# shellcheck disable=SC2206  # EXTRA_ARGS is word-split on purpose
[[ -n ${EXTRA_ARGS:-} ]] && rest+=($EXTRA_ARGS)

IFS=: read -r -a env_files <<<"${ENV_FILE:-}"
for f in "${env_files[@]}"; do
  [[ -r $f ]] || die "--env $f is not readable"
  # shellcheck source=/dev/null
  source "$f" || die "sourcing $f failed"
done
[[ -n ${HOSTFILE:-} ]] || die "no hostfile: give --hostfile FILE (see jobs/mpirun/hostfile.example)"
[[ -r $HOSTFILE ]] || die "hostfile $HOSTFILE is not readable"
HOSTFILE=$(realpath "$HOSTFILE")
[[ -n ${CONFIG:-} ]] || die "no config: give --config FILE after -- (or CONFIG=FILE)"
[[ -r $CONFIG ]] || die "config $CONFIG is not readable"
CONFIG=$(realpath "$CONFIG")
if [[ -n ${DATA:-} ]]; then
  [[ -r $DATA ]] || die "dataset $DATA is not readable here (every host must see it at the same path)"
  DATA=$(realpath "$DATA")
fi
MERIDIAN=${MERIDIAN:-$root/build/meridian}
[[ -x $MERIDIAN ]] || die "no meridian binary at $MERIDIAN (build it, or set MERIDIAN; the same path on every host)"
mpirun=${MPIRUN:-mpirun}
command -v "$mpirun" >/dev/null || die "'$mpirun' not found (jobs/setup-node.sh installs Open MPI; or set MPIRUN)"
RUN_DIR=$(realpath -m "${RUN_DIR:-runs/$(date +%Y%m%d-%H%M%S)}")
max_restarts=${MAX_RESTARTS:-3}

# Hosts and ranks: N per host with --ranks-per-node, else each host's slots=.
hosts=0 slots=0 no_slots=()
while read -r host rest_of_line; do
  [[ -z $host || $host == \#* ]] && continue
  hosts=$((hosts + 1))
  if [[ $rest_of_line =~ slots[[:space:]]*=[[:space:]]*([0-9]+) ]]; then slots=$((slots + BASH_REMATCH[1]))
  else no_slots+=("$host"); fi
done <"$HOSTFILE"
((hosts > 0)) || die "hostfile $HOSTFILE names no host"
launch=("$mpirun" --hostfile "$HOSTFILE")
if [[ -n ${RANKS_PER_NODE:-} ]]; then
  [[ $RANKS_PER_NODE =~ ^[1-9][0-9]*$ ]] || die "--ranks-per-node must be a positive number, got '$RANKS_PER_NODE'"
  np=$((hosts * RANKS_PER_NODE))
  launch+=(-np "$np" --map-by "ppr:$RANKS_PER_NODE:node")
else
  ((${#no_slots[@]} == 0)) || die "no slots= for ${no_slots[*]} in $HOSTFILE: give each host slots=<GPUs> or use --ranks-per-node"
  np=$slots
  launch+=(-np "$np")
fi
if [[ -n ${MPIRUN_ARGS:-} ]]; then
  # shellcheck disable=SC2206
  launch+=($MPIRUN_ARGS)
else
  launch+=(--bind-to none)
fi
# Environment for the ranks on other hosts (mpirun passes OMPI_* itself, nothing else unless asked).
while read -r name; do launch+=(-x "$name"); done < <(compgen -e | grep -E '^(NCCL_|UCX_|MERIDIAN_|OMP_|TORCH_|HDF5_|CUDA_DEVICE_ORDER$|LD_LIBRARY_PATH$)' | sort)
if [[ $(id -u) -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

echo "train.sh: $np ranks on $hosts host(s) from $HOSTFILE; run directory $RUN_DIR"
if [[ ${DOCTOR:-0} == 1 ]]; then
  doctor=("${launch[@]}" "$MERIDIAN" doctor --run-dir "$RUN_DIR" ${DATA:+--data "$DATA"})
  echo "train.sh: preflight: ${doctor[*]}"
  if ((dry == 0)); then
    mkdir -p "$RUN_DIR" || die "cannot create $RUN_DIR"
    "${doctor[@]}"
    rc=$?
    ((rc == 0)) || { echo "train.sh: meridian doctor exited with $rc: fix what it reports (docs/troubleshooting.md) before training" >&2; exit "$rc"; }
  fi
fi
cmd=("$root/jobs/mpirun-restart.sh" --max-restarts "$max_restarts" --backoff "${BACKOFF:-10,30,60}" --log "$RUN_DIR/restarts.log" --
     "${launch[@]}" "$MERIDIAN" train --config "$CONFIG" ${DATA:+--data "$DATA"} --run-dir "$RUN_DIR" --resume auto "${rest[@]}")
echo "train.sh: ${cmd[*]}"
((dry == 1)) && exit 0
mkdir -p "$RUN_DIR" || die "cannot create $RUN_DIR"
# mpirun passes SIGUSR1/SIGTERM on to the ranks (a checkpoint, then exit code 4); exec keeps this
# script out of the way.
exec "${cmd[@]}"
