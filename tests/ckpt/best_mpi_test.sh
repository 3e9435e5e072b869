#!/usr/bin/env bash
# Usage: best_mpi_test.sh MPIRUN MERIDIAN — checkpoint.best, train.patience and train.eval_every_epochs
# on 2 ranks (a tiny SigLIP, evaluated on its training set every 2 steps):
#  1. an uninterrupted run links best.h5 to the checkpoint of its best mR and stops when train.patience
#     evaluations in a row did not beat it;
#  2. the same run with one rank killed (SIGKILL) after its first best and resumed (--resume auto)
#     stops at the same step, with best.h5 naming the same step and bit-identical weights: the best so
#     far and the patience count are part of the checkpoint; resuming the finished run does nothing;
#  3. train.eval_every_epochs 1 evaluates when each epoch of the data ends, and after the last step;
#  4. bad settings exit 2 naming the key: a metric the task does not report, train.patience without
#     checkpoint.best; checkpoint.best without data.eval trains with a warning, no best.h5.
set -u
mpirun=$1 meridian=$2
# shellcheck source=tests/mpi_script_lib.sh
source "$(dirname "$0")/../mpi_script_lib.sh"
source "$(dirname "$0")/fixture.sh"
killer=
trap '[[ -n $killer ]] && kill $killer 2>/dev/null; rm -rf "$tmp"' EXIT
make_fixture "train: {batch: 8, steps: 80, log_every: 1, eval_every: 2, patience: 3, health_every: 0}
checkpoint: {best: mR, every_steps: 3, keep_last: 2}"
# 200 ms more per step on rank 0, so that a kill lands mid-run.
cmd=("$mpirun" --oversubscribe -np 2 "$meridian" train --config "$tmp/small.yaml" --data "$tmp/data.h5"
  --set data.eval="$tmp/data.h5" --inject-straggler 0:compute:200 --comm-timeout 20)

# 1. Uninterrupted.
"${cmd[@]}" --run-dir "$tmp/ref" >"$tmp/ref.out" 2>&1 || { tail -20 "$tmp/ref.out"; fail "the uninterrupted run exited $?"; }
ref_best=$(grep "^best: " "$tmp/ref.out")
[[ $ref_best =~ "; stopped at step "([0-9]+)": 3 evaluations without a better mR" ]] ||
  { tail -20 "$tmp/ref.out"; fail "the run did not stop by patience: '$ref_best'"; }
stop=${BASH_REMATCH[1]}
target=$(readlink "$tmp/ref/checkpoints/best.h5") || fail "no best.h5 link"
best_step=${target#step_}
best_step=$((10#${best_step%.h5}))
[[ $ref_best == *"at step $best_step "* ]] || fail "best.h5 -> $target, but the run said '$ref_best'"
grep -q "step  *$stop/80" "$tmp/ref.out" && ! grep -q "step  *$((stop + 1))/80" "$tmp/ref.out" ||
  fail "the run did not end at step $stop"
echo "uninterrupted: $ref_best (best.h5 -> $target)"

# 2. Killed after its first best, resumed.
kill_step=$((best_step + 2))
(
  for _ in $(seq 1 600); do
    if grep -q "step  *$kill_step/80" "$tmp/faulty.out" 2>/dev/null; then
      victim=$(pgrep -f -- "--run-dir $tmp/faulty" | while read -r p; do
                 [[ $(cat /proc/$p/comm 2>/dev/null) == meridian ]] && echo "$p"; done | shuf -n 1)
      [[ -n $victim ]] && kill -9 "$victim" && echo "killed pid $victim" >"$tmp/killed"
      exit 0
    fi
    sleep 0.05
  done
) &
killer=$!
"${cmd[@]}" --run-dir "$tmp/faulty" >"$tmp/faulty.out" 2>&1 && fail "the run to be killed ended normally"
wait $killer
killer=
[[ -f $tmp/killed ]] || fail "the killer never fired"
"${cmd[@]}" --run-dir "$tmp/faulty" --resume auto >"$tmp/resumed.out" 2>&1 ||
  { tail -20 "$tmp/resumed.out"; fail "the resumed run exited $?"; }
grep -q "resumed from .*step_000000" "$tmp/resumed.out" || fail "the second run did not resume"
best=$(grep "^best: " "$tmp/resumed.out")
[[ ${best//faulty/ref} == "$ref_best" ]] || fail "resumed: '$best', uninterrupted: '$ref_best'"
[[ $(readlink "$tmp/faulty/checkpoints/best.h5") == "$target" ]] || fail "best.h5 -> $(readlink "$tmp/faulty/checkpoints/best.h5")"
h5diff -r "$tmp/ref/checkpoints/best.h5" "$tmp/faulty/checkpoints/best.h5" /model /model >"$tmp/diff" ||
  { head "$tmp/diff"; fail "best.h5's weights differ from the uninterrupted run's"; }
echo "killed at step $kill_step, resumed: $best"
"${cmd[@]}" --run-dir "$tmp/faulty" --resume auto >"$tmp/again.out" 2>&1 || fail "resuming the finished run exited $?"
grep -q "3 evaluations without a better mR .*nothing to do" "$tmp/again.out" || { tail "$tmp/again.out"; fail "a finished run trained on"; }

# 3. Evaluations at epoch ends: 128 samples, 16 per step: 8 steps per epoch.
out=$("$mpirun" --oversubscribe -np 2 "$meridian" train --config "$tmp/small.yaml" --data "$tmp/data.h5" \
  --set data.eval="$tmp/data.h5" --set train.eval_every=0 --set train.eval_every_epochs=1 --set train.patience=0 \
  --set train.steps=20 --run-dir "$tmp/epochs" 2>&1) || { echo "$out"; fail "eval_every_epochs exited"; }
evals=$(grep -oE "eval at step [0-9]+" <<<"$out" | grep -oE "[0-9]+$" | tr '\n' ' ')
[[ $evals == "8 16 20 " ]] || fail "eval_every_epochs 1 evaluated at steps $evals (expected 8 16 20)"
echo "eval_every_epochs 1: evaluations at steps $evals"

# 4. Bad settings.
bad() { "$mpirun" --oversubscribe -np 2 "$meridian" train --config "$tmp/small.yaml" --data "$tmp/data.h5" --run-dir "$tmp/bad" "$@"; }
expect_error "a metric the task does not report" "checkpoint.best.*is 'map50_95'; task siglip's evaluation reports" \
  bad --set data.eval="$tmp/data.h5" --set checkpoint.best=map50_95
expect_error "patience without a metric" "train.patience.*set checkpoint.best too" \
  bad --set data.eval="$tmp/data.h5" --set checkpoint.best=
[[ ! -e $tmp/bad/checkpoints ]] || fail "a refused run wrote checkpoints"
out=$(bad --set train.steps=4 2>&1) || { echo "$out"; fail "checkpoint.best without data.eval exited $?"; }
grep -q "warn.*checkpoint.best mR and train.patience: no data.eval to evaluate on, so no best.h5 and no early stop" <<<"$out" ||
  { echo "$out"; fail "no warning for checkpoint.best without data.eval"; }
[[ ! -e $tmp/bad/checkpoints/best.h5 ]] || fail "best.h5 without evaluations"
echo PASS
