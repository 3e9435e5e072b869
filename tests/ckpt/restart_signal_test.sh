#!/usr/bin/env bash
# Usage: restart_signal_test.sh RESTART_SCRIPT — jobs/mpirun-restart.sh stops for good when it is
# sent SIGTERM or SIGUSR1: the signal reaches the running attempt and no further attempt starts,
# also when the command exits 1 after it (Open MPI's mpirun does after forwarding SIGTERM); the
# script exits 4, or 0 / 3 when the attempt ended so. A failure without a signal is still retried
# with --resume auto. No MPI and no training: a small script plays mpirun.
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
[[ -n ${FAKE_FAIL:-} ]] && exit 1
while true; do sleep 0.1; done
FAKE

# Starts the restart script on the fake; with a signal, sends it once the first attempt runs. Then
# waits up to 10 s for the script to end (else kills everything it started and fails); sets rc.
run_case() {  # DIR SIGNAL(or -) [FAKE_RC]
  local dir=$1 sig=$2
  mkdir -p "$dir"
  FAKE_DIR=$dir FAKE_RC=${3:-1} bash "$restart" --max-restarts 2 --pause 0 --log "$dir/log" -- \
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
echo PASS
