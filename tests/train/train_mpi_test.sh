#!/usr/bin/env bash
# Usage: train_mpi_test.sh MPIRUN MERIDIAN — SigLIP training end to end on 2 ranks: a synthetic
# dataset, a small model, 40 steps; the loss must fall well below its start (ln 2 x 32 + ... at
# initialisation, about 10 with bias -10), and bad options must be clear errors.
set -u
mpirun=$1 meridian=$2
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$mpirun" --oversubscribe -np 2 "$meridian" prep synthetic --count 256 --size 64 --vocab-size 400 --context-length 24 \
  --out "$tmp/data.h5" >/dev/null || fail "prep exited $?"
cat >"$tmp/small.yaml" <<'YAML'
model:
  image_size: 64
  patch: 8
  vision: {width: 64, depth: 2, heads: 2, mlp_ratio: 2}
  context_length: 24
  vocab_size: 400
  text: {width: 64, depth: 2, heads: 2, mlp_ratio: 2}
  embed: 64
train: {batch: 16, steps: 40, lr: 1.0e-3, warmup: 5, log_every: 10}
YAML
out=$("$mpirun" --oversubscribe -np 2 "$meridian" train --config "$tmp/small.yaml" --data "$tmp/data.h5" 2>&1) || { echo "$out"; fail "train exited $?"; }
echo "$out"
python3 - "$out" <<'PY' || fail "the loss did not fall enough"
import re, sys
m = re.search(r"train: 40 steps, loss ([0-9.]+) -> ([0-9.]+)", sys.argv[1])
assert m, "no summary line"
first, last = float(m.group(1)), float(m.group(2))
print("loss", first, "->", last)
assert last < 0.6 * first, (first, last)
PY
"$mpirun" --oversubscribe -np 2 "$meridian" train --config "$tmp/small.yaml" --data "$tmp/data.h5" --set train.batch=0 \
  >"$tmp/o" 2>&1 && fail "train.batch=0 accepted"
grep -q "small.yaml: field 'train.batch': must be at least 1" "$tmp/o" || { cat "$tmp/o"; fail "no clear message for train.batch"; }
echo PASS
