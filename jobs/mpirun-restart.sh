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
# Lost nodes and partitions: each attempt runs with MERIDIAN_ABORT_FILE set; a rank that ends the job
# (its watchdog found a collective that never completes, a fatal error) writes a line there. When
# mpirun has not exited --abort-grace seconds after that (it cannot reach a node that lost its
# network, and waits for it forever), it is killed. Before each restart, every host of the command's
# --hostfile is probed through the launcher's agent (--mca plm_rsh_agent, else ssh); hosts that do
# not answer within 20 s are left out of that attempt's hostfile (written beside --log, or in /tmp)
# and -np shrinks by their slots: the run continues on the others through the elastic resume.
#
# Usage: jobs/mpirun-restart.sh [--max-restarts N (3)] [--pause SECONDS (10)] [--log FILE]
#            [--abort-grace SECONDS (10)] -- \
#            mpirun -np 8 --hostfile hosts build/meridian train --config ... --run-dir runs/x
# The command must name a --run-dir (where checkpoints are) so that a restart finds them.
set -uo pipefail
max_restarts=3 pause=10 log= grace=10
while [[ $# -gt 0 ]]; do
  case $1 in
    --max-restarts) max_restarts=$2; shift 2 ;;
    --pause) pause=$2; shift 2 ;;
    --log) log=$2; shift 2 ;;
    --abort-grace) grace=$2; shift 2 ;;
    --) shift; break ;;
    -h | --help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "mpirun-restart.sh: unknown option '$1' (the command goes after --)" >&2; exit 2 ;;
  esac
done
[[ $# -gt 0 ]] || { echo "mpirun-restart.sh: no command (give it after --)" >&2; exit 2; }
[[ $max_restarts =~ ^[0-9]+$ ]] || { echo "mpirun-restart.sh: --max-restarts must be a number, got '$max_restarts'" >&2; exit 2; }
[[ $pause =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "mpirun-restart.sh: --pause must be seconds, got '$pause'" >&2; exit 2; }
[[ $grace =~ ^[0-9]+$ ]] || { echo "mpirun-restart.sh: --abort-grace must be whole seconds, got '$grace'" >&2; exit 2; }
grep -q -- "--run-dir" <<<"$*" || { echo "mpirun-restart.sh: the command needs --run-dir (restarts resume from its checkpoints)" >&2; exit 2; }
say() { local line="[mpirun-restart $(date -u +%FT%TZ)] $*"; echo "$line" >&2; [[ -n $log ]] && echo "$line" >>"$log"; return 0; }

cmd=("$@")
# The abort files and rewritten hostfiles: beside --log, else a directory removed at the end.
if [[ -n $log ]]; then
  work=$(dirname "$log")
  mkdir -p "$work" || { echo "mpirun-restart.sh: cannot create $work" >&2; exit 2; }
else
  work=$(mktemp -d /tmp/mpirun-restart.XXXXXX) || exit 2
  trap 'rm -rf "$work"' EXIT
fi

# The value after the first of the options $1... in the command (empty when absent); `--mca NAME`
# counts as one option.
option() {
  local i name
  for ((i = 0; i < ${#cmd[@]} - 1; i++)); do
    for name in "$@"; do
      [[ "${cmd[i]} ${cmd[i + 1]}" == "$name" ]] && { echo "${cmd[i + 2]:-}"; return; }
      [[ ${cmd[i]} == "$name" ]] && { echo "${cmd[i + 1]}"; return; }
    done
  done
}
agent=$(option "--mca plm_rsh_agent")
agent=${agent:-${OMPI_MCA_plm_rsh_agent:-ssh -o BatchMode=yes -o ConnectTimeout=10}}
hostfile=$(option --hostfile -hostfile --machinefile)

# Probes the hostfile's hosts; when some do not answer, writes a hostfile of the others and sets
# `dropped` to the slots they had. Returns 1 when no host answers.
probe_hosts() {
  local out=$work/hostfile.attempt$1 host rest slots answered=0
  dropped=0
  : >"$out"
  while read -r host rest; do
    [[ -z $host || $host == \#* ]] && continue
    slots=1
    [[ $rest =~ slots[[:space:]]*=[[:space:]]*([0-9]+) ]] && slots=${BASH_REMATCH[1]}
    # shellcheck disable=SC2086  # the agent is a command line
    if timeout 20 $agent "$host" true </dev/null >/dev/null 2>&1; then
      echo "$host $rest" >>"$out"
      answered=1
    else
      say "host $host does not answer ($agent $host true): leaving it out ($slots slot(s))"
      dropped=$((dropped + slots))
    fi
  done <"$hostfile"
  ((answered)) || return 1
  ((dropped == 0)) || reduced_hostfile=$out
  return 0
}

# The command with --hostfile and -np/-n changed for the hosts that answered.
shrink() {
  local i np
  for ((i = 0; i < ${#run[@]}; i++)); do
    case ${run[i]} in
      --hostfile | -hostfile | --machinefile) run[i + 1]=$reduced_hostfile ;;
      -np | -n | --np | -c)
        np=$((run[i + 1] - dropped))
        ((np >= 1)) || np=1
        say "ranks: ${run[i + 1]} -> $np"
        run[i + 1]=$np ;;
    esac
  done
}

# The exit code the job reported in its abort file (empty when none).
reported_exit() { sed -n 's/.* exit \([0-9]*\): .*/\1/p' "$1" 2>/dev/null | head -1; }

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
    if [[ -n $hostfile ]]; then
      reduced_hostfile=
      probe_hosts "$attempt" || { say "no host of $hostfile answers: giving up"; exit 3; }
      [[ -n $reduced_hostfile ]] && shrink
    fi
  fi
  say "attempt $attempt: ${run[*]}"
  start=$(date +%s)
  abort_file=$work/abort.attempt$attempt
  rm -f "$abort_file"
  # In the background, so that SIGTERM/SIGUSR1 sent to this script (Slurm's --signal=B:USR1) reach
  # mpirun, which passes them to the ranks: they checkpoint and exit with code 4.
  MERIDIAN_ABORT_FILE=$abort_file "${run[@]}" &
  child=$!
  aborted_at= killed=
  while kill -0 $child 2>/dev/null; do
    if [[ -z $aborted_at && -s $abort_file ]]; then
      aborted_at=$(date +%s)
      say "the job reported its end: $(head -1 "$abort_file")"
    fi
    if [[ -n $aborted_at && -z $killed ]] && (( $(date +%s) - aborted_at >= grace )); then
      say "mpirun has not exited $grace s after that (a node it cannot reach?): killing it"
      kill -TERM $child 2>/dev/null
      killed=$(date +%s)
    fi
    [[ -n $killed ]] && (( $(date +%s) - killed >= 5 )) && kill -KILL $child 2>/dev/null
    sleep 1 &
    wait $! 2>/dev/null  # in the background, so that a trapped signal is handled at once
  done
  wait $child
  rc=$?
  child=
  if [[ -n $killed ]]; then
    reported=$(reported_exit "$abort_file")
    rc=${reported:-3}
  fi
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
