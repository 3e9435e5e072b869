#!/usr/bin/env bash
# Usage: train_mpi_test.sh MPIRUN MERIDIAN — SigLIP training end to end on 2 ranks: a synthetic
# dataset, a small model, 40 steps; the loss must fall well below its start (about 10 with the
# initial bias -10), retrieval and zero-shot must beat chance, and bad options must be clear errors.
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
out=$("$mpirun" --oversubscribe -np 2 "$meridian" train --config "$tmp/small.yaml" --data "$tmp/data.h5" \
      --set train.eval_data="$tmp/data.h5" 2>&1) || { echo "$out"; fail "train exited $?"; }
echo "$out"
python3 - "$out" <<'PY' || fail "the loss did not fall enough"
import re, sys
m = re.search(r"train: 40 steps, loss ([0-9.]+) -> ([0-9.]+)", sys.argv[1])
assert m, "no summary line"
first, last = float(m.group(1)), float(m.group(2))
print("loss", first, "->", last)
assert last < 0.6 * first, (first, last)
# Retrieval and zero-shot after 40 steps, far above chance (untrained: R@10 about 2 %, zero-shot
# about 2 %; chance for 10 classes is 10 %).
e = re.search(r"eval: i2t R@1 ([0-9.]+) R@5 ([0-9.]+) R@10 ([0-9.]+)  t2i R@1 ([0-9.]+) R@5 ([0-9.]+) R@10 ([0-9.]+)  zero-shot ([0-9.]+)%", sys.argv[1])
assert e, "no eval line"
values = [float(v) for v in e.groups()]
assert all(0 <= v <= 100 for v in values), values
assert values[0] <= values[1] <= values[2] and values[3] <= values[4] <= values[5], "recall must grow with k"
assert values[2] > 10 and values[6] > 20, values
PY
"$mpirun" --oversubscribe -np 2 "$meridian" train --config "$tmp/small.yaml" --data "$tmp/data.h5" --set train.batch=0 \
  >"$tmp/o" 2>&1 && fail "train.batch=0 accepted"
grep -q "small.yaml: field 'train.batch': must be at least 1" "$tmp/o" || { cat "$tmp/o"; fail "no clear message for train.batch"; }
echo PASS
