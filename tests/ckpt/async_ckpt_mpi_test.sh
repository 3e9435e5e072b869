#!/usr/bin/env bash
# Usage: async_ckpt_mpi_test.sh MPIRUN MERIDIAN SOURCE_DIR — checkpoint.async on lm-tiny, 2 ranks:
#  - background saves hold exactly what synchronous ones hold (/model, /optim bit for bit), with ZeRO-3
#    too, and a run resumed from one ends where the uninterrupted run ends;
#  - a rank killed (SIGKILL) while a background write is in flight (a test hook makes the write
#    last 3 s, its .tmp file already created) leaves the previous checkpoint as `latest`; the
#    half-written step is not taken for a checkpoint, and `--resume auto` from the previous one
#    ends bit-identical to the uninterrupted run.
set -u
mpirun=$1 meridian=$2 src=$3
source "$(dirname "$0")/../mpi_script_lib.sh"
synthetic text.h5
args=(train --config "$src/jobs/configs/lm-tiny.yaml" --data "$tmp/text.h5" --set train.batch=4 --set data.seq_len=64
  --set train.steps=6 --set optim.lr=3e-3 --set optim.warmup=1 --set checkpoint.every_steps=2 --set checkpoint.keep_last=10
  --set train.health_every=0 --set train.log_every=100)
run() {  # run NAME [--set ...]
  local name=$1
  shift
  "$mpirun" --oversubscribe -np 2 "$meridian" "${args[@]}" --run-dir "$tmp/$name" "$@" >"$tmp/$name.log" 2>&1 ||
    { cat "$tmp/$name.log"; fail "train $name $* exited"; }
}
ck() { echo "$tmp/$1/checkpoints/step_0000000$2.h5"; }
same() {  # same A B
  for group in /model /optim; do
    h5diff -r "$1" "$2" $group $group >"$tmp/diff" 2>&1 || { head -20 "$tmp/diff"; fail "$group differs: $1 vs $2"; }
  done
}

run sync
run async --set checkpoint.async=true --log-level info
grep -q "step_00000006.h5 written in the background" "$tmp/async.log" || fail "no background save logged"
for step in 2 4 6; do same "$(ck sync $step)" "$(ck async $step)"; done
[ "$(cat "$tmp/async/checkpoints/latest")" = step_00000006.h5 ] || fail "latest is not the last step"
run sync3 --set optim.zero=3
run async3 --set optim.zero=3 --set checkpoint.async=true
for step in 2 6; do same "$(ck sync3 $step)" "$(ck async3 $step)"; done
run resumed --set checkpoint.async=true --resume "$(ck async 2)"
same "$(ck async 6)" "$(ck resumed 6)"

# Kill rank 1 while step 4's background write is in flight.
MERIDIAN_TEST_CKPT_DELAY_S=3 "$mpirun" --oversubscribe -np 2 -x MERIDIAN_TEST_CKPT_DELAY_S "$meridian" "${args[@]}" \
  --set checkpoint.async=true --run-dir "$tmp/killed" --log-level info >"$tmp/killed.log" 2>&1 &
launcher=$!
for _ in $(seq 1 600); do
  grep -q "checkpoint step 4:" "$tmp/killed.log" && break
  sleep 0.1
done
grep -q "checkpoint step 4:" "$tmp/killed.log" || { kill $launcher; cat "$tmp/killed.log"; fail "no background save of step 4"; }
sleep 1
[ -e "$tmp/killed/checkpoints/step_00000004.h5.tmp" ] || fail "step 4's .tmp is not being written"
pkill -9 -n -f -- "--run-dir $tmp/killed" || fail "no rank to kill"
wait $launcher && fail "the job survived the kill"
[ "$(cat "$tmp/killed/checkpoints/latest")" = step_00000002.h5 ] || fail "latest moved: $(cat "$tmp/killed/checkpoints/latest")"
[ -e "$tmp/killed/checkpoints/step_00000004.h5" ] && fail "the half-written step 4 became a checkpoint"
run killed --set checkpoint.async=true --resume auto --log-level info
grep -q "resumed from .*step_00000002.h5" "$tmp/killed.log" || fail "auto did not resume from step 2"
same "$(ck async 6)" "$(ck killed 6)"
echo PASS
