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
# network, and waits for it forever), it is killed.
# Restarts back off (--backoff, default 10,30,60 s: the last repeats), so that a network that comes
# back within a minute or two is waited for. Before each restart every host of the command's
# --hostfile is probed: through the launcher's agent (--mca plm_rsh_agent, else ssh) within 20 s,
# and the interfaces the job is told to use (btl_tcp_if_include, oob_tcp_if_include as --mca options
# or OMPI_MCA_* variables, NCCL_SOCKET_IFNAME) must be up there. A host that fails is left out of that
# attempt's hostfile (written beside --log, or in /tmp) and -np shrinks by its slots: the run continues
# on the others through the elastic resume, and the host is probed again before the next attempt.
# Launch failures: an attempt in which no rank started (MERIDIAN_STARTED_FILE stays empty: mpirun could
# not start its daemons) counts against --max-launch-failures, not --max-restarts; before the next
# attempt, mpirun starts a daemon on each host alone (`mpirun --mca ... --host H -np 1 true`) and the
# hosts where that fails are named and left out too.
# Growing back (a node that comes back rejoins): while an attempt runs without some hosts of the
# hostfile, they are probed every --rejoin-every seconds (the same probe, with the daemon check).
# When a host passes twice in a row, the script weighs the run's remaining time at the current size
# (metrics.csv and attempts.jsonl in --run-dir) against what a restart costs (the last checkpoint's
# write time from logs/rank_0.log and this attempt's launch-to-first-step time; once a grow-back has
# happened, what that one cost): when growing back saves time, the running attempt is sent SIGUSR1 (it
# checkpoints at the end of the step and stops) and the next attempt runs on the full hostfile with
# `--resume auto`, at the larger world size with the same global batch. Such a stop is not a failure
# (it counts against no limit and has no pause). A host that is lost again within --flap-window
# seconds of rejoining has flapped: it rejoins again only after passing every probe for
# --flap-window x 2^(flaps - 1) seconds, so a flapping node cannot restart the job in a loop.
#
# Usage: jobs/mpirun-restart.sh [--max-restarts N (3)] [--max-launch-failures N (5)]
#            [--backoff S1,S2,... (10,30,60)] [--log FILE] [--abort-grace SECONDS (10)]
#            [--rejoin-every SECONDS (60; 0: never grow back)] [--flap-window SECONDS (600)] -- \
#            mpirun -np 8 --hostfile hosts build/meridian train --config ... --run-dir runs/x
#        (--pause S is --backoff S: the same pause before every restart)
# The command must name a --run-dir (where checkpoints are) so that a restart finds them.
set -uo pipefail
max_restarts=3 max_launch_failures=5 backoff=10,30,60 log= grace=10 rejoin_every=60 flap_window=600
while [[ $# -gt 0 ]]; do
  case $1 in
    --max-restarts) max_restarts=$2; shift 2 ;;
    --max-launch-failures) max_launch_failures=$2; shift 2 ;;
    --backoff | --pause) backoff=$2; shift 2 ;;
    --log) log=$2; shift 2 ;;
    --abort-grace) grace=$2; shift 2 ;;
    --rejoin-every) rejoin_every=$2; shift 2 ;;
    --flap-window) flap_window=$2; shift 2 ;;
    --) shift; break ;;
    -h | --help) sed -n '2,43p' "$0"; exit 0 ;;
    *) echo "mpirun-restart.sh: unknown option '$1' (the command goes after --)" >&2; exit 2 ;;
  esac
done
[[ $# -gt 0 ]] || { echo "mpirun-restart.sh: no command (give it after --)" >&2; exit 2; }
[[ $max_restarts =~ ^[0-9]+$ ]] || { echo "mpirun-restart.sh: --max-restarts must be a number, got '$max_restarts'" >&2; exit 2; }
[[ $max_launch_failures =~ ^[0-9]+$ ]] ||
  { echo "mpirun-restart.sh: --max-launch-failures must be a number, got '$max_launch_failures'" >&2; exit 2; }
[[ $backoff =~ ^[0-9]+([.][0-9]+)?(,[0-9]+([.][0-9]+)?)*$ ]] ||
  { echo "mpirun-restart.sh: --backoff must be seconds separated by commas (e.g. 10,30,60), got '$backoff'" >&2; exit 2; }
IFS=, read -r -a pauses <<<"$backoff"
[[ $grace =~ ^[0-9]+$ ]] || { echo "mpirun-restart.sh: --abort-grace must be whole seconds, got '$grace'" >&2; exit 2; }
[[ $rejoin_every =~ ^[0-9]+$ ]] || { echo "mpirun-restart.sh: --rejoin-every must be whole seconds (0: never), got '$rejoin_every'" >&2; exit 2; }
[[ $flap_window =~ ^[0-9]+$ ]] || { echo "mpirun-restart.sh: --flap-window must be whole seconds, got '$flap_window'" >&2; exit 2; }
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
agent=$(option "--mca plm_rsh_agent" "-mca plm_rsh_agent")
agent=${agent:-${OMPI_MCA_plm_rsh_agent:-ssh -o BatchMode=yes -o ConnectTimeout=10}}
hostfile=$(option --hostfile -hostfile --machinefile)

# The interfaces the job is told to use, as "SETTING=VALUE": Open MPI's if_include lists (names or
# CIDR subnets) and NCCL_SOCKET_IFNAME (name prefixes, =exact names, ^excluded ones).
required=()
for setting in btl_tcp_if_include oob_tcp_if_include; do
  value=$(option "--mca $setting" "-mca $setting")
  value=${value:-$(printenv "OMPI_MCA_$setting")}
  [[ -n $value ]] && required+=("$setting=$value")
done
value=$(printf '%s\n' "${cmd[@]}" | sed -n 's/^NCCL_SOCKET_IFNAME=//p' | head -1)  # -x NCCL_SOCKET_IFNAME=...
value=${value:-${NCCL_SOCKET_IFNAME:-}}
[[ -n $value ]] && required+=("NCCL_SOCKET_IFNAME=$value")
# What a host says of its interfaces: "if NAME OPERSTATE" lines, then `ip -o -4 addr` lines.
# shellcheck disable=SC2016  # expanded on the host
facts_cmd='for d in /sys/class/net/*; do echo "if ${d##*/} $(cat $d/operstate 2>/dev/null)"; done; ip -o -4 addr show 2>/dev/null; true'
# The mpirun of the command and its --mca/--prefix options: a daemon started on one host alone (empty
# when the command is not mpirun: no daemon check).
launcher=()
case $(basename "${cmd[0]}") in
  mpirun | mpiexec | orterun)
    launcher=("${cmd[0]}")
    for ((i = 1; i < ${#cmd[@]} - 2; i++)); do
      case ${cmd[i]} in
        --mca | -mca) launcher+=("${cmd[i]}" "${cmd[i + 1]}" "${cmd[i + 2]}"); ((i += 2)) ;;
        --prefix) launcher+=("${cmd[i]}" "${cmd[i + 1]}"); ((i++)) ;;
      esac
    done ;;
esac

ip_number() { local a b c d; IFS=. read -r a b c d <<<"$1"; echo $(((a << 24) + (b << 16) + (c << 8) + d)); }
# Whether FACTS (facts_cmd's output) has an interface up that SETTING=VALUE names.
iface_up() {
  local facts=$1 setting=${2%%=*} value=${2#*=} item name state up_names addr net bits
  up_names=$(awk '$1 == "if" && ($3 == "up" || $3 == "unknown") {print $2}' <<<"$facts")
  IFS=, read -r -a items <<<"$value"
  for item in "${items[@]}"; do
    if [[ $item == */* ]]; then  # a subnet: an up interface with an address in it
      net=$(ip_number "${item%/*}") bits=${item#*/}
      while read -r name addr; do
        grep -qx "$name" <<<"$up_names" || continue
        (( ($(ip_number "${addr%/*}") ^ net) >> (32 - bits) == 0 )) && return 0
      done < <(awk '$3 == "inet" {print $2, $4}' <<<"$facts")
    elif [[ $setting == NCCL_SOCKET_IFNAME ]]; then
      [[ $item == ^* ]] && return 0  # an exclusion list: any interface will do
      if [[ $item == =* ]]; then grep -qx -- "${item#=}" <<<"$up_names" && return 0
      else grep -q -- "^$item" <<<"$up_names" && return 0; fi
    else
      grep -qx -- "$item" <<<"$up_names" && return 0
    fi
  done
  return 1
}

# Probes one host; prints nothing when it may take part, else why not.
probe_host() {
  local host=$1 facts spec rc
  # shellcheck disable=SC2086  # the agent is a command line
  if ! facts=$(timeout 20 $agent "$host" "$facts_cmd" </dev/null 2>/dev/null); then
    echo "host $host does not answer ($agent $host): leaving it out"
    return
  fi
  for spec in "${required[@]}"; do
    iface_up "$facts" "$spec" || { echo "host $host: no interface that $spec names is up: leaving it out"; return; }
  done
  if ((check_daemons && ${#launcher[@]} > 0)); then
    timeout 30 "${launcher[@]}" --host "$host" -np 1 true </dev/null >/dev/null 2>&1
    rc=$?
    ((rc == 0)) || echo "host $host: mpirun cannot start its daemon there (exit $rc): leaving it out"
  fi
}

# Probes the hostfile's hosts (all at once); when some fail, writes a hostfile of the others and sets
# `dropped` to the slots they had. Returns 1 when no host passes.
probe_hosts() {
  local out=$work/hostfile.attempt$1 host rest slots passed=0 k=0 why
  dropped=0
  : >"$out"
  while read -r host rest; do
    [[ -z $host || $host == \#* ]] && continue
    k=$((k + 1))
    probe_host "$host" >"$work/probe.$k" &
  done <"$hostfile"
  wait
  k=0
  while read -r host rest; do
    [[ -z $host || $host == \#* ]] && continue
    k=$((k + 1))
    slots=1
    [[ $rest =~ slots[[:space:]]*=[[:space:]]*([0-9]+) ]] && slots=${BASH_REMATCH[1]}
    why=$(cat "$work/probe.$k")
    rm -f "$work/probe.$k"
    if [[ -z $why ]]; then
      echo "$host $rest" >>"$out"
      passed=1
    else
      say "$why ($slots slot(s))"
      dropped=$((dropped + slots))
      left_out+=("$host")
      note_flap "$host"
    fi
  done <"$hostfile"
  ((passed)) || return 1
  ((dropped == 0)) || reduced_hostfile=$out
  return 0
}

# A host left out within --flap-window s of rejoining has flapped: it must pass the probes for longer
# before it rejoins again (hold[host] seconds, doubling with each flap).
declare -A rejoined_at=() flaps=() hold=() passes=() first_pass=()
note_flap() {
  local host=$1 since
  [[ -n ${rejoined_at[$host]:-} ]] || return 0
  since=$(($(date +%s) - rejoined_at[$host]))
  unset "rejoined_at[$host]"
  ((since < flap_window)) || return 0
  flaps[$host]=$((${flaps[$host]:-0} + 1))
  hold[$host]=$((flap_window << (flaps[$host] - 1)))
  say "host $host was lost again $since s after it rejoined (flap ${flaps[$host]}): it rejoins only after passing every probe for ${hold[$host]} s (--flap-window $flap_window, doubled at each flap)"
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
        run[i + 1]=$np np_now=$np ;;
    esac
  done
}

# The exit code the job reported in its abort file (empty when none).
reported_exit() { sed -n 's/.* exit \([0-9]*\): .*/\1/p' "$1" 2>/dev/null | head -1; }

# ---- Growing back ---------------------------------------------------------------------------------
run_dir=$(option --run-dir)
[[ -n $run_dir ]] || run_dir=$(printf '%s\n' "${cmd[@]}" | sed -n 's/^--run-dir=//p' | head -1)
full_np=$(option -np -n --np -c)
# shellcheck source=jobs/lib/grow_back.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/grow_back.sh"

# In the background: probes the left-out hosts (with the daemon check), each into $work/rejoin.HOST.
probe_left_out() {
  local host
  check_daemons=1
  for host in "${left_out[@]}"; do probe_host "$host" >"$work/rejoin.$host" & done
  wait
}

# Whether growing from $np_now to $full_np ranks saves time (grow_back_verdict's codes); says why.
worth_growing() {
  local line rc
  [[ -n $full_np ]] || { say "the command names no -np: the full size is unknown, not growing back"; return 1; }
  line=$(grow_back_verdict "$run_dir" "$start" "$np_now" "$full_np" "$measured_cost")
  rc=$?
  ((rc == 2)) && line+=": asking again at the next probe"
  say "$line"
  return "$rc"
}

# After a probe of the left-out hosts: counts each host's passes in a row and, when one has passed
# twice (and its flap hold), asks the attempt to checkpoint and stop so that the next grows back.
consider_rejoin() {
  local host now ready=() since=
  now=$(date +%s)
  for host in "${left_out[@]}"; do
    if [[ -s $work/rejoin.$host ]]; then
      ((${passes[$host]:-0} > 0)) && say "$(cat "$work/rejoin.$host") (its passes start again)"
      passes[$host]=0
      unset "first_pass[$host]"
    else
      passes[$host]=$((${passes[$host]:-0} + 1))
      [[ -n ${first_pass[$host]:-} ]] || first_pass[$host]=$now
      if ((passes[$host] >= 2 && now - first_pass[$host] >= ${hold[$host]:-0})); then
        ready+=("$host")
        if [[ -z $since ]] || ((first_pass[$host] < since)); then since=${first_pass[$host]}; fi
      else
        say "host $host passes the probe again (${passes[$host]} in a row$( [[ -n ${hold[$host]:-} ]] && echo ", $((now - first_pass[$host])) of the ${hold[$host]} s it must hold after flapping"))"
      fi
    fi
    rm -f "$work/rejoin.$host"
  done
  ((${#ready[@]})) || return 0
  worth_growing
  case $? in
    0)
      say "host(s) ${ready[*]} passed the probe twice in a row: asking attempt $attempt to checkpoint and stop (SIGUSR1), then relaunching on the full hostfile with --resume auto"
      grow_hosts="${ready[*]}" grow_asked=$now grow_since=$since
      kill -USR1 "$child" 2>/dev/null ;;
    1) say "not growing back in this attempt: the run ends before a restart would pay for itself"; left_out=() ;;
  esac
}

attempt=0 failures=0 launch_failures=0 check_daemons=0
left_out=() measured_cost= grow_hosts= grow_asked= grow_since= growing= joined_report= np_now=$full_np
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
      reduced_hostfile= left_out=() passes=() first_pass=() np_now=$full_np
      # A host that fails again at the grow-back's own probe has flapped too.
      for host in $growing; do rejoined_at[$host]=$(date +%s); done
      probe_hosts "$attempt" || { say "no host of $hostfile passes the probe: giving up"; exit 3; }
      [[ -n $reduced_hostfile ]] && shrink
    fi
  fi
  if [[ -n $growing ]]; then  # the grow-back's attempt: the hosts that came back and passed again
    joined=()
    for host in $growing; do
      [[ " ${left_out[*]} " == *" $host "* ]] || joined+=("$host")
    done
    joined_report="${joined[*]}"
    [[ -n $joined_report ]] && say "attempt $attempt grows back: $joined_report rejoin(s), $np_before -> $np_now ranks"
  fi
  say "attempt $attempt: ${run[*]}"
  ((${#left_out[@]} && rejoin_every > 0)) &&
    say "probing the left-out host(s) ${left_out[*]} every $rejoin_every s: the run grows back when one passes twice in a row"
  start=$(date +%s)
  abort_file=$work/abort.attempt$attempt started_file=$work/started.attempt$attempt
  rm -f "$abort_file" "$started_file"
  # In the background, so that SIGTERM/SIGUSR1 sent to this script (Slurm's --signal=B:USR1) reach
  # mpirun, which passes them to the ranks: they checkpoint and exit with code 4.
  MERIDIAN_ABORT_FILE=$abort_file MERIDIAN_STARTED_FILE=$started_file "${run[@]}" &
  child=$!
  aborted_at= killed= prober= next_probe=$((start + rejoin_every)) grow_asked=
  while kill -0 $child 2>/dev/null; do
    # Growing back: probe the left-out hosts every --rejoin-every s (in the background).
    if ((${#left_out[@]} && rejoin_every > 0)) && [[ -z $grow_asked && -z $prober && -z $stop ]] && (($(date +%s) >= next_probe)); then
      probe_left_out &
      prober=$!
    fi
    if [[ -n $prober ]] && ! kill -0 "$prober" 2>/dev/null; then
      wait "$prober"
      prober= next_probe=$(($(date +%s) + rejoin_every))
      [[ -z $aborted_at && -z $stop ]] && consider_rejoin
    fi
    # The grow-back's figure: from the host's return to the first step at the full size.
    if [[ -n $joined_report ]] && at=$(grow_first_step_at "$run_dir" "$start") && [[ -n $at ]]; then
      measured_cost=$(awk -v a="$at" -v b="$grow_asked_then" 'BEGIN {printf "%.0f", a - b}')
      say "$joined_report rejoined: first step at $np_now ranks $(awk -v a="$at" -v b="$grow_since_then" 'BEGIN {printf "%.1f", a - b}') s after its return (its first passing probe); the restart cost $measured_cost s (stop and checkpoint $grow_stop_s s, relaunch to first step $(awk -v a="$at" -v b="$start" 'BEGIN {printf "%.1f", a - b}') s)"
      joined_report=
    fi
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
  [[ -n $prober ]] && { kill "$prober" 2>/dev/null; wait "$prober" 2>/dev/null; }
  # Killed here, or by meridian's own watcher (a signal's exit code): the code the job reported.
  if { [[ -n $killed ]] || ((rc > 128)); } && [[ -s $abort_file ]]; then
    reported=$(reported_exit "$abort_file")
    rc=${reported:-3}
  fi
  say "attempt $attempt: exit code $rc after $(( $(date +%s) - start )) s"
  case $rc in
    0) exit 0 ;;
    2) say "bad input: not retrying"; exit 2 ;;
    4) [[ -n $grow_asked && -z $stop ]] || { say "stopped on a signal after a checkpoint: not retrying (resubmit to continue)"; exit 4; } ;;
  esac
  [[ -n $stop ]] && stopped " after exit code $rc" "$([[ $rc == 3 ]] && echo 3 || echo 4)"
  growing= joined_report=
  if [[ -n $grow_asked && $rc != 3 ]]; then  # stopped to grow back (mpirun may exit 1 passing SIGUSR1 on)
    grow_asked_then=$grow_asked grow_stop_s=$(($(date +%s) - grow_asked))
    say "attempt $attempt stopped to grow back $grow_stop_s s after SIGUSR1: relaunching at once"
    growing=$grow_hosts np_before=$np_now grow_since_then=$grow_since
    continue
  fi
  if [[ -s $started_file ]]; then
    failures=$((failures + 1)) check_daemons=0
    if (( failures > max_restarts )); then
      say "giving up after $max_restarts restart(s)"
      exit "$rc"
    fi
  else
    launch_failures=$((launch_failures + 1)) check_daemons=1
    say "attempt $attempt: the launch failed before any rank started (launch failure $launch_failures of at most $max_launch_failures; mpirun's output above says why)"
    if (( launch_failures > max_launch_failures )); then
      say "giving up after $max_launch_failures launch failure(s)"
      exit "$rc"
    fi
  fi
  k=$((failures + launch_failures - 1))
  ((k < ${#pauses[@]})) || k=$((${#pauses[@]} - 1))
  say "next attempt in ${pauses[k]} s"
  sleep "${pauses[k]}" &
  wait $! || kill $! 2>/dev/null  # in the background, so that a signal during the pause ends it at once
done
