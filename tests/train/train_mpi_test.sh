#!/usr/bin/env bash
# Usage: train_mpi_test.sh MPIRUN MERIDIAN — SigLIP training end to end on 2 ranks: a synthetic
# dataset, a small model, 40 steps; the loss must fall well below its start (about 10 with the
# initial bias -10), retrieval and zero-shot must rise from the untrained model's to well above
# chance, the run directory must hold the resolved config, metrics.csv and TensorBoard events,
# the CLIP loss option must train, and bad options must be clear errors.
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
train: {batch: 16, steps: 40, log_every: 10, eval_at_start: true}
optim: {lr: 1.0e-3, warmup: 5}
YAML
out=$("$mpirun" --oversubscribe -np 2 "$meridian" train --config "$tmp/small.yaml" --data "$tmp/data.h5" \
      --set data.eval="$tmp/data.h5" --run-dir "$tmp/run" 2>&1) || { rc=$?; echo "$out"; fail "train exited $rc"; }
echo "$out"
python3 - "$out" "$tmp/run" <<'PY' || fail "training did not do what it should"
import csv, os, re, sys
out, run = sys.argv[1], sys.argv[2]
m = re.search(r"train: 40 steps, loss ([0-9.]+) -> ([0-9.]+)", out)
assert m, "no summary line"
first, last = float(m.group(1)), float(m.group(2))
print("loss", first, "->", last)
assert last < 0.6 * first, (first, last)
def evals(which):
    e = re.search(which + r": i2t_r1 ([0-9.]+)  i2t_r5 ([0-9.]+)  i2t_r10 ([0-9.]+)  t2i_r1 ([0-9.]+)  t2i_r5 ([0-9.]+)  t2i_r10 ([0-9.]+)  zero_shot ([0-9.]+)", out)
    assert e, "no '%s' line" % which
    v = [float(x) for x in e.groups()]
    assert all(0 <= x <= 100 for x in v), v
    assert v[0] <= v[1] <= v[2] and v[3] <= v[4] <= v[5], "recall must grow with k"
    return v
before, after = evals("eval before"), evals("eval after")
print("before", before, "after", after)
# After 40 steps, far above chance (R@10 of 256 images x 5 captions: about 2 %; zero-shot over 10
# classes: 10 %) and above the untrained model.
assert after[2] > 10 and after[6] > 20, after
assert after[2] > before[2] and after[6] > before[6], (before, after)
# The run directory: the resolved config (with the overrides), metrics and TensorBoard events.
config = open(os.path.join(run, "config.yaml")).read()
assert "data.h5" in config and "eval_at_start: true" in config, config
rows = list(csv.DictReader(open(os.path.join(run, "metrics.csv"))))
names = {r["name"] for r in rows}
for n in ["train/loss", "train/samples_per_s", "train/data_s", "train/forward_s", "train/backward_s", "train/comm_s",
          "train/optimizer_s", "eval/i2t_r10", "eval/zero_shot"]:
    assert n in names, (n, names)
assert sorted(int(r["step"]) for r in rows if r["name"] == "train/loss") == [1, 11, 21, 31, 40]
assert sorted(int(r["step"]) for r in rows if r["name"] == "eval/zero_shot") == [0, 40]
events = os.listdir(os.path.join(run, "tensorboard"))
assert len(events) == 1 and events[0].startswith("events.out.tfevents."), events
PY
# The CLIP softmax loss: starts near log(32) + s^2 / 2 (32 = the global batch; logits 10 x.y of random
# unit vectors of width 64 spread with s about 10 / sqrt(64), so about 4.2) and falls.
out=$("$mpirun" --oversubscribe -np 2 "$meridian" train --config "$tmp/small.yaml" --data "$tmp/data.h5" \
      --set task.loss=softmax --set train.steps=15 --set train.eval_at_start=false --run-dir "$tmp/clip" 2>&1) \
  || { rc=$?; echo "$out"; fail "train with task.loss=softmax exited $rc"; }
python3 - "$out" <<'PY' || fail "the CLIP loss did not fall"
import math, re, sys
m = re.search(r"train: 15 steps, loss ([0-9.]+) -> ([0-9.]+)", sys.argv[1])
assert m, "no summary line"
first, last = float(m.group(1)), float(m.group(2))
print("clip loss", first, "->", last)
assert math.log(32) < first < math.log(32) + 1.5 and last < first - 0.3, (first, last)
PY
"$mpirun" --oversubscribe -np 2 "$meridian" train --config "$tmp/small.yaml" --data "$tmp/data.h5" --set train.batch=0 \
  --run-dir "$tmp/bad" >"$tmp/o" 2>&1 && fail "train.batch=0 accepted"
grep -q -- "--set: field 'train.batch': expected an integer >= 1, got '0'" "$tmp/o" || { cat "$tmp/o"; fail "no clear message for train.batch"; }
"$mpirun" --oversubscribe -np 2 "$meridian" train --config "$tmp/small.yaml" --data "$tmp/data.h5" --set task.loss=hinge \
  --run-dir "$tmp/bad" >"$tmp/o" 2>&1 && fail "task.loss=hinge accepted"
grep -q -- "--set: field 'task.loss': expected one of sigmoid or softmax, got 'hinge'" "$tmp/o" || { cat "$tmp/o"; fail "no clear message for task.loss"; }
echo PASS
