#!/usr/bin/env bash
# Usage: damage_mpi_test.sh MPIRUN MERIDIAN — issue 73's trial: a small SigLIP run with checkpoints at steps 2
# and 4, step 4's file damaged in 13 ways (empty, cut in half, the HDF5 superblock zeroed, 8 seeded runs of
# random bytes in the first 64 KiB, `latest` naming a missing file, and the known HDF5 heap-corrupting input
# tests/fuzz/known/h5_checkpoint/link-table-free written over the HDF5 part); each time `train --resume auto`
# to step 6 must skip step 4 (the whole-file checksum refuses it before HDF5 reads it), fall back to step 2,
# exit 0 and end bit-identical to the uninterrupted run (h5diff of /model and /optim at step 6).
set -u
mpirun=$1 meridian=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
command -v h5diff >/dev/null || fail "h5diff missing (hdf5-tools)"
source "$(dirname "$0")/fixture.sh"
make_fixture "train: {batch: 8, steps: 6, log_every: 100}
checkpoint: {every_steps: 2, keep_last: 5}"
train() { "$mpirun" --oversubscribe -np 2 "$meridian" train --config "$tmp/small.yaml" --data "$tmp/data.h5" --log-level info "$@"; }
train --run-dir "$tmp/ref" >/dev/null 2>&1 || fail "reference"
train --run-dir "$tmp/base" --set train.stop_at=4 >/dev/null 2>&1 || fail "base"
known=$(dirname "$0")/../fuzz/known/h5_checkpoint/link-table-free
ok=0
for kind in empty half superblock-zeroed random-1 random-2 random-3 random-4 random-5 random-6 random-7 random-8 latest-missing known-crash; do
  d=$tmp/$kind; cp -r "$tmp/base" "$d"; f=$d/checkpoints/step_00000004.h5; size=$(stat -c %s "$f")
  case $kind in
    empty) : >"$f" ;;
    half) truncate -s $((size / 2)) "$f" ;;
    superblock-zeroed) dd if=/dev/zero of="$f" bs=1 seek=4096 count=96 conv=notrunc status=none ;;
    latest-missing) rm "$f"; echo step_00000004.h5 >"$d/checkpoints/latest" ;;
    known-crash) dd if="$known" of="$f" bs=4096 seek=1 conv=notrunc status=none ;;
    random-*) python3 -c "
import random, sys
rng = random.Random(int(sys.argv[2]))
with open(sys.argv[1], 'r+b') as f:
    for _ in range(8):
        f.seek(rng.randrange(0, 65536 - 16)); f.write(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16))))
" "$f" "${kind#random-}" ;;
  esac
  train --run-dir "$d" --resume auto >"$d.out" 2>&1; rc=$?
  skip=$(grep -o "resume: skipping .*" "$d.out" | head -1 | cut -c1-150)
  from=$(grep -o "resumed from [^:]*: step [0-9]*" "$d.out" | head -1)
  same=yes
  for g in /model /optim; do h5diff -r "$tmp/ref/checkpoints/step_00000006.h5" "$d/checkpoints/step_00000006.h5" $g $g >/dev/null 2>&1 || same=no; done
  echo "$kind: exit $rc; ${from:-no resume}; identical $same; ${skip:-no skip line}"
  [[ $rc == 0 && $from == *step_00000002.h5*"step 2" && $same == yes ]] && ok=$((ok + 1))
done
echo "trial: $ok of 13 ended cleanly (skip, fall back to step 2, exit 0, bit-identical at step 6)"
[[ $ok == 13 ]] || fail "$((13 - ok)) damaged checkpoint(s) did not end cleanly (above)"
echo PASS
