#!/usr/bin/env bash
# Usage: restart_signal_test.sh RESTART_SCRIPT — jobs/mpirun-restart.sh stops for good when it is
# sent SIGTERM or SIGUSR1: the signal reaches the running attempt and no further attempt starts,
# also when the command exits 1 after it (Open MPI's mpirun does after forwarding SIGTERM); the
# script exits 4, or 0 / 3 when the attempt ended so. A failure without a signal is still retried
# with --resume auto, after the pauses of --backoff; a launch in which no rank started counts against
# --max-launch-failures, not --max-restarts; before a restart, hosts whose interface is down or whose
# daemon cannot start are left out. No MPI and no training: small scripts play mpirun and ssh.
set -u
restart=$1
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# The fake mpirun: records its pid, arguments and any TERM/USR1, and exits FAKE_RC a moment after
# the signal (at once with FAKE_FAIL set); otherwise it runs until signalled.
cat >"$tmp/fake.sh" <<'FAKE'
echo $$ >>"$FAKE_DIR/pids"
trap 'echo TERM >>"$FAKE_DIR/signals"; sleep 0.2; exit "$FAKE_RC"' TERM
trap 'echo USR1 >>"$FAKE_DIR/signals"; sleep 0.2; exit "$FAKE_RC"' USR1
echo "$*" >>"$FAKE_DIR/starts"
[[ -n ${FAKE_NOSTART:-} ]] && exit 213  # as mpirun when a daemon does not start: no rank ran
echo "rank 0 started" >>"$MERIDIAN_STARTED_FILE"  # what meridian's ranks write after MPI_Init
[[ -n ${FAKE_FAIL:-} ]] && exit 1
while true; do sleep 0.1; done
FAKE

# Starts the restart script on the fake; with a signal, sends it once the first attempt runs. Then
# waits up to 10 s for the script to end (else kills everything it started and fails); sets rc.
run_case() {  # DIR SIGNAL(or -) [FAKE_RC]
  local dir=$1 sig=$2
  mkdir -p "$dir"
  # shellcheck disable=SC2086  # RESTART_OPTS: options, word-split
  FAKE_DIR=$dir FAKE_RC=${3:-1} bash "$restart" --max-restarts 2 ${RESTART_OPTS:---pause 0} --log "$dir/log" -- \
    bash "$tmp/fake.sh" --run-dir "$dir/run" >"$dir/out" 2>&1 &
  local pid=$!
  if [[ $sig != - ]]; then
    for _ in $(seq 100); do [[ -s $dir/starts ]] && break; sleep 0.1; done
    [[ -s $dir/starts ]] || fail "$dir: the first attempt never started"
    kill -"$sig" "$pid"
  fi
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    kill -9 "$pid" $(cat "$dir/pids") 2>/dev/null
    cat "$dir/log"
    fail "$dir: still running 10 s after SIG$sig, $(wc -l <"$dir/starts") attempt(s) started"
  fi
  wait "$pid"
  rc=$?
}

for case in "TERM 1 4" "USR1 1 4" "TERM 0 0" "TERM 3 3" "TERM 4 4"; do
  read -r sig fake_rc want <<<"$case"
  dir=$tmp/$sig-$fake_rc
  run_case "$dir" "$sig" "$fake_rc"
  cat "$dir/log"
  [[ $rc == "$want" ]] || fail "SIG$sig, command exit $fake_rc: the script exited $rc, expected $want"
  [[ $(wc -l <"$dir/starts") == 1 ]] || fail "SIG$sig, command exit $fake_rc: $(wc -l <"$dir/starts") attempts, expected 1"
  [[ $(cat "$dir/signals") == "$sig" ]] || fail "SIG$sig was not passed to the attempt (got '$(cat "$dir/signals" 2>/dev/null)')"
  if [[ $fake_rc != 0 && $fake_rc != 4 ]]; then
    grep -q "stopped on request (SIG$sig)" "$dir/log" || fail "SIG$sig, command exit $fake_rc: no 'stopped on request' in the log"
  fi
done

# Without a signal a failing command is retried, the retry with --resume auto.
FAKE_FAIL=1 run_case "$tmp/fail" -
cat "$tmp/fail/log"
[[ $rc == 1 ]] || fail "a failing command: the script exited $rc, expected 1 (after the restarts)"
[[ $(wc -l <"$tmp/fail/starts") == 3 ]] || fail "a failing command: $(wc -l <"$tmp/fail/starts") attempts, expected 3"
[[ $(sed -n 2p "$tmp/fail/starts") == *"--resume auto" ]] || fail "the second attempt lacks --resume auto"

# The pauses back off as --backoff says, the last one repeating.
FAKE_FAIL=1 RESTART_OPTS="--backoff 0,1 --max-launch-failures 0" run_case "$tmp/backoff" -
[[ $(grep -o "next attempt in [0-9]* s" "$tmp/backoff/log" | tr '\n' ,) == "next attempt in 0 s,next attempt in 1 s," ]] ||
  { cat "$tmp/backoff/log"; fail "--backoff 0,1: the pauses are not 0 then 1 s"; }

# No rank started: launch failures, counted apart from the restarts.
FAKE_NOSTART=1 RESTART_OPTS="--pause 0 --max-launch-failures 3" run_case "$tmp/nostart" -
cat "$tmp/nostart/log"
[[ $rc == 213 ]] || fail "launch failures: the script exited $rc, expected 213 (mpirun's)"
[[ $(wc -l <"$tmp/nostart/starts") == 4 ]] || fail "launch failures: $(wc -l <"$tmp/nostart/starts") attempts, expected 4 (--max-launch-failures 3)"
grep -q "attempt 1: the launch failed before any rank started (launch failure 1 of at most 3" "$tmp/nostart/log" &&
  grep -q "giving up after 3 launch failure(s)" "$tmp/nostart/log" || fail "launch failures are not reported as such"

# A hostfile of 3 hosts: "nolink" has its interface down, "nodaemon" answers but mpirun cannot start a
# daemon there. The first launch fails; the probe leaves both out; the second attempt runs on "good".
mkdir -p "$tmp/hosts/bin"
printf 'good slots=1\nnolink slots=1\nnodaemon slots=1\n' >"$tmp/hosts/hostfile"
cat >"$tmp/hosts/agent" <<'AGENT'
#!/bin/bash
while [[ $1 == -* ]]; do shift; done
case $1 in
  nolink) printf 'if lo unknown\nif eth0 down\n1: lo inet 127.0.0.1/8 scope host lo\n2: eth0 inet 10.9.0.2/24 brd 10.9.0.255 scope global eth0\n' ;;
  *) printf 'if lo unknown\nif eth0 up\n1: lo inet 127.0.0.1/8 scope host lo\n2: eth0 inet 10.9.0.3/24 brd 10.9.0.255 scope global eth0\n' ;;
esac
AGENT
cat >"$tmp/hosts/bin/mpirun" <<'MPIRUN'
#!/bin/bash
# --host H -np 1 true: the probe's daemon check; else the job on --hostfile F.
args="$*"
if [[ $args =~ --host\ ([a-z]+)\ -np\ 1\ true ]]; then
  echo "${BASH_REMATCH[1]}" >>"$FAKE_DIR/daemon_checks"
  [[ ${BASH_REMATCH[1]} == nodaemon ]] && exit 213
  exit 0
fi
echo "$args" >>"$FAKE_DIR/starts"
[[ $args =~ --hostfile\ ([^ ]+) ]] && grep -q nodaemon "${BASH_REMATCH[1]}" && exit 213
echo "rank 0 started" >>"$MERIDIAN_STARTED_FILE"
exit 0
MPIRUN
chmod +x "$tmp/hosts/agent" "$tmp/hosts/bin/mpirun"
FAKE_DIR=$tmp/hosts bash "$restart" --backoff 0 --log "$tmp/hosts/log" -- "$tmp/hosts/bin/mpirun" \
  --mca plm_rsh_agent "$tmp/hosts/agent" --mca oob_tcp_if_include eth0 --mca btl_tcp_if_include 10.9.0.0/24 \
  --hostfile "$tmp/hosts/hostfile" -np 3 prog --run-dir "$tmp/hosts/run" >"$tmp/hosts/out" 2>&1
rc=$?
cat "$tmp/hosts/log"
[[ $rc == 0 ]] || fail "hosts: the script exited $rc, expected 0"
grep -q "host nolink: no interface that btl_tcp_if_include=10.9.0.0/24 names is up: leaving it out (1 slot(s))" "$tmp/hosts/log" ||
  fail "the host with its interface down was not left out"
grep -q "host nodaemon: mpirun cannot start its daemon there (exit 213): leaving it out (1 slot(s))" "$tmp/hosts/log" ||
  fail "the host whose daemon does not start was not left out"
grep -q "ranks: 3 -> 1" "$tmp/hosts/log" || fail "-np did not shrink to 1"
attempt2=$(sed -n 2p "$tmp/hosts/starts")
[[ $attempt2 =~ --hostfile\ ([^ ]+) ]] && [[ $(cut -d' ' -f1 "${BASH_REMATCH[1]}") == good ]] ||
  fail "the second attempt's hostfile is not 'good' alone: $attempt2"
[[ $(sort "$tmp/hosts/daemon_checks" | tr '\n' ,) == "good,nodaemon," ]] ||
  fail "daemon checks on $(tr '\n' , <"$tmp/hosts/daemon_checks"), expected good and nodaemon (nolink failed before)"
echo PASS
