#!/usr/bin/env bash
# Runs an mpirun training command and, when it fails (a rank died, a node rebooted, the watchdog
# ended a hung job), runs it again with `--resume auto` so it continues from the newest complete
# checkpoint, up to --max-restarts times, pausing between tries. Each attempt is logged with its
# start time, exit code and duration. Exit code 4 (stopped on SIGTERM/SIGUSR1 after a checkpoint)
# and 2 (bad input: the same command would fail again) are not retried.
# SIGTERM or SIGUSR1 sent to this script is passed to the running attempt (the ranks checkpoint and
# stop) and ends the script after it: no further attempt is started, whatever mpirun's exit code
# (Open MPI exits 1, not 4, when it forwards SIGTERM). The script then exits 4 ("stopped on
# request"), or 0 if the attempt had finished, or 2/3 if it ended on bad input or a fatal error.
#
# Usage: jobs/mpirun-restart.sh [--max-restarts N (3)] [--pause SECONDS (10)] [--log FILE] -- \
#            mpirun -np 8 --hostfile hosts build/meridian train --config ... --run-dir runs/x
# The command must name a --run-dir (where checkpoints are) so that a restart finds them.
set -uo pipefail
max_restarts=3 pause=10 log=
while [[ $# -gt 0 ]]; do
  case $1 in
    --max-restarts) max_restarts=$2; shift 2 ;;
    --pause) pause=$2; shift 2 ;;
    --log) log=$2; shift 2 ;;
    --) shift; break ;;
    -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "mpirun-restart.sh: unknown option '$1' (the command goes after --)" >&2; exit 2 ;;
  esac
done
[[ $# -gt 0 ]] || { echo "mpirun-restart.sh: no command (give it after --)" >&2; exit 2; }
[[ $max_restarts =~ ^[0-9]+$ ]] || { echo "mpirun-restart.sh: --max-restarts must be a number, got '$max_restarts'" >&2; exit 2; }
[[ $pause =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "mpirun-restart.sh: --pause must be seconds, got '$pause'" >&2; exit 2; }
grep -q -- "--run-dir" <<<"$*" || { echo "mpirun-restart.sh: the command needs --run-dir (restarts resume from its checkpoints)" >&2; exit 2; }
say() { local line="[mpirun-restart $(date -u +%FT%TZ)] $*"; echo "$line" >&2; [[ -n $log ]] && echo "$line" >>"$log"; return 0; }

cmd=("$@")
attempt=0
stop= child=  # stop: the signal this script was asked to stop with, passed on to the running attempt
on_signal() { stop=$1; [[ -n $child ]] && kill -"$1" "$child" 2>/dev/null; return 0; }
trap 'on_signal USR1' USR1
trap 'on_signal TERM' TERM
stopped() { say "stopped on request (SIG$stop)$1: not retrying (resubmit to continue)"; exit "$2"; }
while true; do
  [[ -n $stop ]] && stopped " before attempt $((attempt + 1))" 4
  attempt=$((attempt + 1))
  run=("${cmd[@]}")
  if (( attempt > 1 )); then  # the command's own --resume (if any) gives way to auto
    run=()
    for ((i = 0; i < ${#cmd[@]}; i++)); do
      if [[ ${cmd[i]} == --resume ]]; then ((i++)); continue; fi
      [[ ${cmd[i]} == --resume=* ]] && continue
      run+=("${cmd[i]}")
    done
    run+=(--resume auto)
  fi
  say "attempt $attempt: ${run[*]}"
  start=$(date +%s)
  # In the background, so that SIGTERM/SIGUSR1 sent to this script (Slurm's --signal=B:USR1) reach
  # mpirun, which passes them to the ranks: they checkpoint and exit with code 4.
  "${run[@]}" &
  child=$!
  while true; do
    wait $child
    rc=$?
    kill -0 $child 2>/dev/null || break  # wait returned for a trapped signal: the child still runs
  done
  child=
  say "attempt $attempt: exit code $rc after $(( $(date +%s) - start )) s"
  case $rc in
    0) exit 0 ;;
    2) say "bad input: not retrying"; exit 2 ;;
    4) say "stopped on a signal after a checkpoint: not retrying (resubmit to continue)"; exit 4 ;;
  esac
  [[ -n $stop ]] && stopped " after exit code $rc" "$([[ $rc == 3 ]] && echo 3 || echo 4)"
  if (( attempt > max_restarts )); then
    say "giving up after $max_restarts restart(s)"
    exit "$rc"
  fi
  sleep "$pause" &
  wait $! || kill $! 2>/dev/null  # in the background, so that a signal during the pause ends it at once
done
