#!/usr/bin/env bash
# Usage: ckpt_mpi_test.sh MPIRUN MERIDIAN — checkpoints and resume end to end on a small SigLIP:
#  1. exact: 12 steps straight == 6 steps (train.stop_at) + resume + 6 steps, bit for bit (model and
#     optimizer state compared with h5diff), on 2 ranks; the same with SGD and a model EMA (/ema too);
#     resuming that SGD run as AdamW is a clear error; `meridian eval` takes the EMA weights;
#  2. `meridian inspect` lists a checkpoint and verifies it; a corrupted newest checkpoint is
#     reported by inspect and skipped by --resume auto, which takes the previous one; the whole-file
#     checksum refuses 14 kinds of damage before HDF5 (the known HDF5 crash input skipped by a resume
#     that ends bit-identical), reads a file without one, and --no-verify;
#  3. elastic: a 2-rank checkpoint resumes on 4 ranks with the same global batch, and back on 2;
#  4. SIGUSR1 mid-run: a checkpoint at the step it stopped, exit code 4;
#  5. `meridian eval` on a checkpoint; an unwritable checkpoint directory is a clear error.
set -u
mpirun=$1 meridian=$2
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d); pid=
trap '[[ -n $pid ]] && kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT
command -v h5diff >/dev/null || fail "h5diff missing (hdf5-tools)"
source "$(dirname "$0")/fixture.sh"
make_fixture "train: {batch: 8, steps: 12, log_every: 4}
checkpoint: {every_steps: 3, keep_last: 2}"
train() { local np=$1; shift; "$mpirun" --oversubscribe -np "$np" "$meridian" train --config "$tmp/small.yaml" --data "$tmp/data.h5" "$@"; }

# 1. Exact resume.
train 2 --run-dir "$tmp/a" >"$tmp/a.out" 2>&1 || { cat "$tmp/a.out"; fail "straight run exited $?"; }
train 2 --run-dir "$tmp/b" --set train.stop_at=6 --set train.record_samples=true >"$tmp/b1.out" 2>&1 || { cat "$tmp/b1.out"; fail "run to step 6 exited $?"; }
grep -q "stopped at step 6" "$tmp/b1.out" || { cat "$tmp/b1.out"; fail "no stop at step 6"; }
[[ -f $tmp/b/checkpoints/step_00000006.h5 && ! -e $tmp/b/checkpoints/step_00000012.h5 ]] || fail "no checkpoint at step 6"
[[ $(cat "$tmp/b/checkpoints/latest") == step_00000006.h5 ]] || fail "latest does not name step 6"
train 2 --run-dir "$tmp/b" --resume auto --set train.record_samples=true >"$tmp/b2.out" 2>&1 ||
  { cat "$tmp/b2.out"; fail "resumed run exited $?"; }
grep -q "resumed from .*step_00000006.h5: step 6" "$tmp/b2.out" || { cat "$tmp/b2.out"; fail "did not resume from step 6"; }
# The sample record across the resume: 128 rows, global batch 16: epoch 0 whole (8 steps), 4 steps of epoch 1.
python3 "$(dirname "$0")/../tools/check_samples.py" "$tmp/b" 128 12 16 || fail "the sample record of 6 + 6 steps"
ls "$tmp/a/checkpoints"
[[ $(ls "$tmp/a/checkpoints" | grep -c '\.h5$') == 2 ]] || fail "retention: expected the last 2 checkpoints"
for group in /model /optim; do
  h5diff -r "$tmp/a/checkpoints/step_00000012.h5" "$tmp/b/checkpoints/step_00000012.h5" $group $group >"$tmp/diff" \
    || { head -20 "$tmp/diff"; fail "$group differs between the straight and the resumed run"; }
done
echo "exact resume: model and optimizer state identical"

# 1b. Exact resume with SGD (Nesterov momentum) and a model EMA: /model, /optim and /ema identical.
sgd=(--set train.ema=0.99 --set optim.name=sgd --set optim.lr=0.01 --set checkpoint.every_steps=6)
train 2 --run-dir "$tmp/s" "${sgd[@]}" >"$tmp/s.out" 2>&1 || { cat "$tmp/s.out"; fail "SGD+EMA straight run exited $?"; }
train 2 --run-dir "$tmp/t" "${sgd[@]}" --set train.stop_at=6 >"$tmp/t1.out" 2>&1 || { cat "$tmp/t1.out"; fail "SGD+EMA run to step 6 exited $?"; }
train 2 --run-dir "$tmp/t" "${sgd[@]}" --resume auto >"$tmp/t2.out" 2>&1 || { cat "$tmp/t2.out"; fail "SGD+EMA resumed run exited $?"; }
grep -q "resumed from .*step_00000006.h5: step 6" "$tmp/t2.out" || { cat "$tmp/t2.out"; fail "SGD+EMA: did not resume from step 6"; }
h5ls -r "$tmp/s/checkpoints/step_00000012.h5" >"$tmp/s.ls"
grep -q "^/optim/.*/momentum_buffer " "$tmp/s.ls" && grep -q "^/ema/" "$tmp/s.ls" && ! grep -q "exp_avg" "$tmp/s.ls" \
  || { cat "$tmp/s.ls"; fail "SGD+EMA checkpoint: expected optim/*/momentum_buffer and ema/*, no AdamW moments"; }
for group in /model /optim /ema; do
  h5diff -r "$tmp/s/checkpoints/step_00000012.h5" "$tmp/t/checkpoints/step_00000012.h5" $group $group >"$tmp/diff" \
    || { head -20 "$tmp/diff"; fail "SGD+EMA: $group differs between the straight and the resumed run"; }
done
h5diff "$tmp/s/checkpoints/step_00000012.h5" "$tmp/s/checkpoints/step_00000006.h5" /ema /ema >/dev/null \
  && fail "SGD+EMA: the EMA did not change between steps 6 and 12"
for f in s t; do h5dump -a /ema_updates "$tmp/$f/checkpoints/step_00000012.h5" | grep -q "(0): 12$" || fail "$f: ema_updates is not 12"; done
train 2 --run-dir "$tmp/t" --resume auto --set train.ema=0.99 --set optim.lr=0.01 --set train.steps=14 >"$tmp/t3.out" 2>&1 \
  && fail "an SGD checkpoint resumed with AdamW"
grep -q "holds sgd optimizer state (optim.name sgd), this run uses optim.name adamw" "$tmp/t3.out" || { cat "$tmp/t3.out"; fail "SGD -> AdamW: no clear message"; }
"$mpirun" --oversubscribe -np 2 "$meridian" eval --checkpoint "$tmp/s/checkpoints/step_00000012.h5" --data "$tmp/data.h5" \
  >"$tmp/sv" 2>&1 || { cat "$tmp/sv"; fail "eval of the EMA checkpoint exited $?"; }
grep -q "loaded the EMA weights (ema/\*, 12 updates)" "$tmp/sv" || { cat "$tmp/sv"; fail "eval did not load the EMA weights"; }
echo "exact resume with SGD + EMA: model, optimizer and EMA identical"

# 2. Inspect, corruption, fallback.
"$meridian" inspect "$tmp/b/checkpoints/step_00000012.h5" >"$tmp/i" 2>&1 || { cat "$tmp/i"; fail "inspect exited $?"; }
grep -q "step 12, written by 2 ranks" "$tmp/i" && grep -q "all checksums verified" "$tmp/i" || { cat "$tmp/i"; fail "inspect output"; }
cp -r "$tmp/b" "$tmp/c"
python3 - "$tmp/c/checkpoints/step_00000012.h5" <<'PY'
import os, sys
path = sys.argv[1]
size = os.path.getsize(path)
with open(path, "r+b") as f:  # flip bytes well inside the data (past the superblock and headers)
    f.seek(size // 2)
    chunk = f.read(64)
    f.seek(size // 2)
    f.write(bytes(b ^ 0xFF for b in chunk))
PY
"$meridian" inspect "$tmp/c/checkpoints/step_00000012.h5" >"$tmp/i" 2>&1 && fail "inspect accepted a corrupted checkpoint"
grep -qE "checksum mismatch|corrupt|cannot" "$tmp/i" || { cat "$tmp/i"; fail "no clear message for the corrupted checkpoint"; }
train 2 --run-dir "$tmp/c" --resume auto --set train.steps=14 >"$tmp/c.out" 2>&1 || { cat "$tmp/c.out"; fail "fallback resume exited $?"; }
grep -q "resume: skipping .*step_00000012.h5" "$tmp/c.out" && grep -q "resumed from .*step_00000009.h5: step 9" "$tmp/c.out" \
  || { cat "$tmp/c.out"; fail "resume auto did not fall back to step 9"; }

# 2b. The whole-file checksum (issue 73): a checkpoint is a plain HDF5 file behind a 4096-byte user
# block that holds its checksum; every damage is refused before HDF5 reads a byte (exit 2 naming the
# file, never a crash), the known HDF5 heap-corrupting input included; a file from before checksums
# (the same file without its user block) is still read, said to be unverified; --no-verify reads a
# file whose checksum header alone is damaged.
good=$tmp/b/checkpoints/step_00000012.h5
[[ $(head -c 31 "$good") == "meridian-checkpoint-checksum 1" ]] || fail "no checksum header at the start of $good"
h5ls -r "$good" | grep -q "^/model" || fail "h5ls cannot read a sealed checkpoint"
python3 -c "import h5py, sys; f = h5py.File(sys.argv[1], 'r'); assert f.attrs['format'] in (b'meridian-checkpoint', 'meridian-checkpoint'); assert 'model' in f" "$good" \
  || fail "h5py cannot read a sealed checkpoint"
known=$(dirname "$0")/../fuzz/known/h5_checkpoint/link-table-free
damage() {  # NAME: a damaged copy of $good as $tmp/d/NAME.h5
  local out=$tmp/d/$1.h5 size
  mkdir -p "$tmp/d"; cp "$good" "$out"; size=$(stat -c %s "$out")
  case $1 in
    empty) : >"$out" ;;
    half) truncate -s $((size / 2)) "$out" ;;
    header-zeroed) dd if=/dev/zero of="$out" bs=4096 count=1 conv=notrunc status=none ;;
    superblock-zeroed) dd if=/dev/zero of="$out" bs=1 seek=4096 count=96 conv=notrunc status=none ;;
    appended) printf 'x' >>"$out" ;;
    known-crash) dd if="$known" of="$out" bs=4096 seek=1 conv=notrunc status=none ;;
    random-*) python3 - "$out" "${1#random-}" <<'PY'
import random, sys
path, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)
with open(path, "r+b") as f:
    for _ in range(8):  # 8 runs of random bytes somewhere in the first 64 KiB
        f.seek(rng.randrange(0, 65536 - 16))
        f.write(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16))))
PY
    ;;
  esac
}
for kind in empty half header-zeroed superblock-zeroed appended known-crash random-1 random-2 random-3 random-4 \
    random-5 random-6 random-7 random-8; do
  damage $kind
  "$meridian" inspect "$tmp/d/$kind.h5" >"$tmp/i" 2>&1; rc=$?
  [[ $rc == 2 ]] && grep -q "$tmp/d/$kind.h5" "$tmp/i" \
    || { cat "$tmp/i"; fail "inspect of the damaged ($kind) checkpoint: exit $rc, expected 2 naming the file"; }
  [[ $kind == empty || $kind == header-zeroed ]] || grep -q "$tmp/d/$kind.h5: checksum: " "$tmp/i" \
    || { cat "$tmp/i"; fail "inspect of the damaged ($kind) checkpoint: no checksum message"; }
done
echo "14 damaged checkpoints refused before HDF5 (exit 2 naming the file)"
tail -c +4097 "$good" >"$tmp/d/unsealed.h5"  # HDF5 addresses are relative to the user block: a plain file
"$meridian" inspect "$tmp/d/unsealed.h5" >"$tmp/i" 2>&1 || { cat "$tmp/i"; fail "inspect of a checkpoint without checksum: exit $?"; }
grep -q "no whole-file checksum .*read without verifying it" "$tmp/i" && grep -q "all checksums verified" "$tmp/i" \
  || { cat "$tmp/i"; fail "a checkpoint without checksum: not read, or not said to be unverified"; }
cp "$good" "$tmp/d/end-line.h5"
python3 - "$tmp/d/end-line.h5" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    head = f.read(4096)
    at = head.index(b"\nend ") + 5
    f.seek(at)
    f.write(b"00000000" if head[at:at + 8] != b"00000000" else b"11111111")
PY
"$meridian" inspect "$tmp/d/end-line.h5" >/dev/null 2>&1 && fail "a damaged checksum header was accepted"
"$meridian" inspect --no-verify "$tmp/d/end-line.h5" >"$tmp/i" 2>&1 || { cat "$tmp/i"; fail "inspect --no-verify exited $?"; }
# The known crash input as the newest checkpoint: --resume auto skips it, falls back to step 9 and
# ends bit-identical to the straight run, with exit 0; attempts.jsonl names the skipped file.
cp -r "$tmp/b" "$tmp/k"
cp "$tmp/d/known-crash.h5" "$tmp/k/checkpoints/step_00000012.h5"
train 2 --run-dir "$tmp/k" --resume auto >"$tmp/k.out" 2>&1 || { cat "$tmp/k.out"; fail "resume past the known crash input exited $?"; }
grep -q "resume: skipping .*step_00000012.h5: .*checksum" "$tmp/k.out" && grep -q "resumed from .*step_00000009.h5: step 9" "$tmp/k.out" \
  || { cat "$tmp/k.out"; fail "resume auto did not skip the known crash input for step 9"; }
for group in /model /optim; do
  h5diff -r "$tmp/a/checkpoints/step_00000012.h5" "$tmp/k/checkpoints/step_00000012.h5" $group $group >"$tmp/diff" \
    || { head -20 "$tmp/diff"; fail "$group differs between the straight run and the one resumed past a corrupt file"; }
done
tail -n 2 "$tmp/k/attempts.jsonl" | grep -q '"skipped_checkpoints":\[".*step_00000012.h5.abandoned\|"skipped_checkpoints":\[".*step_00000012.h5' \
  || { tail -n 2 "$tmp/k/attempts.jsonl"; fail "attempts.jsonl does not name the skipped checkpoint"; }
echo "the known crash input skipped: fell back to step 9, bit-identical at step 12"

# 3. Elastic: 2 -> 4 ranks (global batch 16 = 4 x 4), then 4 -> 2.
train 4 --run-dir "$tmp/e" --resume "$tmp/a/checkpoints/step_00000009.h5" --set train.steps=15 >"$tmp/e.out" 2>&1 \
  || { cat "$tmp/e.out"; fail "2 -> 4 resume exited $?"; }
grep -q "resume: 2 ranks -> 4: train.batch 4 per rank keeps the global batch 16" "$tmp/e.out" || { cat "$tmp/e.out"; fail "2 -> 4 batch"; }
grep -q "resumed from .*: step 9, epoch 1, global position 16" "$tmp/e.out" || { grep resumed "$tmp/e.out"; fail "2 -> 4 position"; }
"$meridian" inspect "$tmp/e/checkpoints/step_00000015.h5" | grep -q "step 15, written by 4 ranks" || fail "4-rank checkpoint"
train 2 --run-dir "$tmp/f" --resume "$tmp/e/checkpoints/step_00000015.h5" --set train.steps=18 >"$tmp/f.out" 2>&1 \
  || { cat "$tmp/f.out"; fail "4 -> 2 resume exited $?"; }
grep -q "2 ranks (1 node) x batch 8 x accumulate 1 = 16 samples per step" "$tmp/f.out" || { cat "$tmp/f.out"; fail "4 -> 2 batch"; }
grep -q "train: 3 steps" "$tmp/f.out" || { cat "$tmp/f.out"; fail "4 -> 2 did not run steps 16..18"; }
# The same command again on 4 ranks after the elastic resume (a restart): train.batch 8 from the
# config would make the global batch 32; it must stay 16.
train 4 --run-dir "$tmp/e" --resume auto --set train.steps=16 >"$tmp/e2.out" 2>&1 || { cat "$tmp/e2.out"; fail "4 -> 4 restart exited $?"; }
grep -q "train.batch 4 per rank keeps the global batch 16" "$tmp/e2.out" || { cat "$tmp/e2.out"; fail "4 -> 4: the global batch changed"; }

# An explicit resume from an older checkpoint: the newer ones are moved aside (an abandoned branch).
train 2 --run-dir "$tmp/b" --resume "$tmp/b/checkpoints/step_00000009.h5" --set train.stop_at=10 >"$tmp/b3.out" 2>&1 \
  || { cat "$tmp/b3.out"; fail "resume from step 9 exited $?"; }
[[ -f $tmp/b/checkpoints/step_00000012.h5.abandoned && -f $tmp/b/checkpoints/step_00000010.h5 ]] \
  || { ls "$tmp/b/checkpoints"; fail "step 12 was not moved aside"; }
[[ $(cat "$tmp/b/checkpoints/latest") == step_00000010.h5 ]] || fail "latest does not name step 10"

# 4. SIGUSR1: checkpoint at the current step, exit code 4.
# (mpirun itself in the background: it forwards SIGUSR1 to the ranks.)
"$mpirun" --oversubscribe -np 2 "$meridian" train --config "$tmp/small.yaml" --data "$tmp/data.h5" --run-dir "$tmp/g" \
  --set train.steps=100000 --set checkpoint.every_steps=0 >"$tmp/g.out" 2>&1 &
pid=$!
for _ in $(seq 1 100); do grep -q "step  *1/" "$tmp/g.out" 2>/dev/null && break; sleep 0.2; done
kill -USR1 $pid
wait $pid; rc=$?; pid=
[[ $rc == 4 ]] || { cat "$tmp/g.out"; fail "SIGUSR1: exit code $rc, expected 4"; }
latest=$(cat "$tmp/g/checkpoints/latest") || fail "SIGUSR1: no checkpoint"
"$meridian" inspect "$tmp/g/checkpoints/$latest" >/dev/null || fail "SIGUSR1 checkpoint does not verify"
echo "SIGUSR1: stopped with $latest"

# 5. eval, and an unwritable checkpoint directory.
"$mpirun" --oversubscribe -np 2 "$meridian" eval --checkpoint "$tmp/a/checkpoints/step_00000012.h5" --data "$tmp/data.h5" \
  >"$tmp/v" 2>&1 || { cat "$tmp/v"; fail "eval exited $?"; }
grep -qE "^eval: i2t_r1 [0-9.]+  i2t_r5 [0-9.]+  i2t_r10 [0-9.]+  t2i_r1 [0-9.]+  t2i_r5 [0-9.]+  t2i_r10 [0-9.]+  zero_shot [0-9.]+  mR [0-9.]+$" "$tmp/v" \
  || { cat "$tmp/v"; fail "eval output"; }
touch "$tmp/not-a-dir"
train 2 --run-dir "$tmp/h" --set checkpoint.dir="$tmp/not-a-dir/ckpt" >"$tmp/h.out" 2>&1 && fail "an unwritable checkpoint directory was accepted"
grep -q "cannot create the checkpoint directory '$tmp/not-a-dir/ckpt'" "$tmp/h.out" || { cat "$tmp/h.out"; fail "no clear message"; }

# 6. A full disk during a save (a tmpfs that holds one checkpoint, not two; needs root to mount):
#    a clear error on every rank, no .tmp left, the previous checkpoint intact.
size=$(stat -c %s "$tmp/a/checkpoints/step_00000012.h5")
mkdir -p "$tmp/full"
if mount -t tmpfs -o size=$(( size * 3 / 2 / 4096 * 4096 + 4096 )) tmpfs "$tmp/full" 2>/dev/null; then
  # Only the checkpoints on the small file system (the logs and metrics elsewhere).
  train 2 --run-dir "$tmp/fullrun" --set checkpoint.dir="$tmp/full/checkpoints" --set checkpoint.every_steps=3 \
    >"$tmp/full.out" 2>&1; rc=$?
  ls -la "$tmp/full/checkpoints" >"$tmp/full.ls" 2>&1
  "$meridian" inspect "$tmp/full/checkpoints/step_00000003.h5" >"$tmp/full.inspect" 2>&1; inspected=$?
  umount "$tmp/full"
  [[ $rc != 0 ]] || { cat "$tmp/full.out"; fail "a full disk during a save was not an error"; }
  grep -q "checkpoint write failed" "$tmp/full.out" || { cat "$tmp/full.out"; fail "no clear message for a full disk"; }
  grep -q "\.tmp" "$tmp/full.ls" && { cat "$tmp/full.ls"; fail "a .tmp checkpoint was left behind"; }
  [[ $inspected == 0 ]] || { cat "$tmp/full.ls" "$tmp/full.inspect"; fail "the previous checkpoint does not verify"; }
  echo "full disk: clear error, step 3 kept"
else
  echo "full disk: skipped (cannot mount a tmpfs here)"
fi
echo PASS
