#!/usr/bin/env bash
# Usage: fault_mpi_test.sh MPIRUN MERIDIAN RESTART_SCRIPT — a 2-rank training run in which one rank
# is killed (SIGKILL) at a random step, under jobs/mpirun-restart.sh, must end with model and
# optimizer state bit-identical to an uninterrupted run of the same length; the killed attempt must
# end promptly (no hang) with the lost rank named.
set -u
mpirun=$1 meridian=$2 restart=$3
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d); killer=
trap '[[ -n $killer ]] && kill $killer 2>/dev/null; rm -rf "$tmp"' EXIT
source "$(dirname "$0")/fixture.sh"
make_fixture "train: {batch: 8, steps: 16, log_every: 1}
checkpoint: {every_steps: 2, keep_last: 2}"
cmd() { echo "$mpirun" --oversubscribe -np 2 "$meridian" train --config "$tmp/small.yaml" --data "$tmp/data.h5" \
  --comm-timeout 20 --run-dir "$1"; }

$(cmd "$tmp/ref") >"$tmp/ref.out" 2>&1 || { cat "$tmp/ref.out"; fail "the uninterrupted run exited $?"; }

kill_step=$((3 + RANDOM % 10))  # 3..12
echo "killing a rank at step $kill_step"
(
  for _ in $(seq 1 600); do
    if grep -q "step  *$kill_step/16" "$tmp/faulty.out" 2>/dev/null; then
      victim=$(pgrep -f -- "--run-dir $tmp/faulty" | while read -r p; do
                 [[ $(cat /proc/$p/comm 2>/dev/null) == meridian ]] && echo "$p"; done | shuf -n 1)
      [[ -n $victim ]] && kill -9 "$victim" && date +%s >"$tmp/killed_at" && echo "killed pid $victim" >"$tmp/killed"
      exit 0
    fi
    sleep 0.05
  done
) &
killer=$!
start=$(date +%s)
bash "$restart" --max-restarts 2 --pause 1 --log "$tmp/restarts.log" -- $(cmd "$tmp/faulty") >"$tmp/faulty.out" 2>&1
rc=$?
cat "$tmp/restarts.log"
[[ $rc == 0 ]] || { tail -40 "$tmp/faulty.out"; fail "the restarted run exited $rc"; }
[[ -f $tmp/killed ]] || fail "the killer never fired"
grep -q "attempt 2: .*--resume auto" "$tmp/restarts.log" || fail "no second attempt with --resume auto"
grep -qE "attempt 1: exit code [1-9]" "$tmp/restarts.log" || fail "the first attempt did not fail"
# The killed attempt ended within the communication timeout (20 s) plus start-up, naming the lost rank.
first_end=$(grep -m1 "attempt 1: exit code" "$tmp/restarts.log")
secs=$(grep -oE "after [0-9]+ s" <<<"$first_end" | grep -oE "[0-9]+")
(( secs < 60 )) || fail "the killed attempt took $secs s"
grep -qiE "process rank [01] .*(signal 9|killed)|rank [01].*(lost|died|signal)" "$tmp/faulty.out" \
  || { grep -i -B2 -A2 "signal\|rank" "$tmp/faulty.out" | head -20; fail "the lost rank is not named"; }
grep -q "resumed from .*step_000000" "$tmp/faulty.out" || fail "the second attempt did not resume"
for group in /model /optim; do
  h5diff -r "$tmp/ref/checkpoints/step_00000016.h5" "$tmp/faulty/checkpoints/step_00000016.h5" $group $group >"$tmp/diff" \
    || { head "$tmp/diff"; fail "$group differs from the uninterrupted run"; }
done
echo "killed at step $kill_step; restarted run identical to the uninterrupted one"
echo PASS
