#!/usr/bin/env bash
# Usage: config_mpi_test.sh MPIRUN MERIDIAN SOURCE_DIR — the config schema end to end: docs/config.md is
# the schema's output, --print-config shows the resolved config, a bad key is exit 2 on every rank
# naming the key, where it came from and the nearest key, with no run directory written (one file and
# one --set case here; every message and every preset in jobs/configs: tests/tasks/config_errors_test.cpp,
# in process), and ranks started with different configs stop within seconds naming the first differing
# key (instead of a hang or different updates).
set -u
mpirun=$1 meridian=$2 src=$3
# shellcheck source=tests/mpi_script_lib.sh
source "$(dirname "$0")/../mpi_script_lib.sh"

"$meridian" config >"$tmp/config.md" || fail "meridian config exited $?"
diff -u "$src/docs/config.md" "$tmp/config.md" >"$tmp/diff" ||
  { head -40 "$tmp/diff"; fail "docs/config.md is out of date: run 'build/meridian config > docs/config.md'"; }
for key in train.batch optim.lr checkpoint.every_steps model.vision.width model.kv_heads model.scale data.seq_len task.class_names; do
  grep -qF "| \`$key\` |" "$tmp/config.md" || fail "docs/config.md does not list $key"
done

# --print-config: the resolved config, defaults included, --set applied, each value's source.
"$meridian" train --config "$src/jobs/configs/demo.yaml" --set optim.clip=2 --print-config >"$tmp/o" 2>&1 || fail "--print-config exited $?"
python3 - "$tmp/o" <<'PY' || fail "--print-config does not show the resolved config"
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
assert c["optim"]["clip"] == 2 and c["train"]["steps"] == 150, c       # --set, the file
assert c["train"]["accumulate"] == 1 and c["checkpoint"]["keep_last"] == 3 and c["task"]["name"] == "siglip", c  # defaults
# Each value says where it came from.
import re
text = open(sys.argv[1]).read()
for line in (r"  clip: 2  # --set", r"  steps: 150  # .*demo\.yaml line \d+", r"  accumulate: 1  # default"):
    assert re.search("^" + line + "$", text, re.M), (line, text)
PY

# Each case: the arguments, then the message expected on exit 2 (under mpirun, every rank exits).
check() {
  local want=$1; shift
  "$mpirun" --oversubscribe -np 2 "$meridian" train --data "$tmp/none.h5" --run-dir "$tmp/run" "$@" >"$tmp/o" 2>&1; local rc=$?
  [[ $rc -eq 2 ]] || { cat "$tmp/o"; fail "$*: exit $rc, expected 2"; }
  grep -qF -- "$want" "$tmp/o" || { cat "$tmp/o"; fail "$*: no message '$want'"; }
  [[ -e $tmp/run/config.yaml ]] && fail "$*: a run directory was written"
  return 0
}
cat >"$tmp/duplicate.yaml" <<'YAML'
train: {steps: 2, batch: 8,
        batch: 4}
YAML
demo=(--config "$src/jobs/configs/demo.yaml")
check "$tmp/duplicate.yaml line 2: field 'train.batch': duplicate key (first given at line 1)" --config "$tmp/duplicate.yaml"
"$meridian" train --config "$tmp/duplicate.yaml" --print-config >"$tmp/o" 2>&1 && { cat "$tmp/o"; fail "--print-config accepted a duplicate key"; }
check "--set: field 'task.conf': not a key of task siglip (task.name); it is a key of task detect" "${demo[@]}" --set task.conf=0.3

# Ranks with different configs: exit 2 on every rank within seconds, naming ranks, hosts and the key.
start=$(date +%s)
timeout 120 "$mpirun" --oversubscribe -np 1 "$meridian" train "${demo[@]}" --data "$tmp/none.h5" --run-dir "$tmp/run" : \
  -np 1 "$meridian" train "${demo[@]}" --data "$tmp/none.h5" --run-dir "$tmp/run" --set optim.lr=0.5 --set train.steps=9 \
  >"$tmp/o" 2>&1; rc=$?
took=$(( $(date +%s) - start ))
cat "$tmp/o"
[[ $rc -eq 2 ]] || fail "ranks with different configs: exit $rc, expected 2"
grep -qF "the training config differs between ranks: rank 1 on $(hostname) differs from rank 0 on $(hostname), first at 'optim.lr': '0.5' on rank 1 vs '1.0e-3' on rank 0" "$tmp/o" ||
  fail "no message naming the ranks and the first differing key"
(( took < 60 )) || fail "the mismatch took $took s to report"
# The same config written differently (a default spelled out, another key order) is the same config.
"$mpirun" --oversubscribe -np 1 "$meridian" train "${demo[@]}" --data "$tmp/none.h5" --run-dir "$tmp/run2" --set train.accumulate=1 : \
  -np 1 "$meridian" train "${demo[@]}" --data "$tmp/none.h5" --run-dir "$tmp/run2" >"$tmp/o" 2>&1
grep -q "differs between ranks" "$tmp/o" && { cat "$tmp/o"; fail "a default spelled out on one rank counted as a difference"; }
grep -q "none.h5" "$tmp/o" || { cat "$tmp/o"; fail "equal configs did not get as far as opening the data"; }

# A config that disagrees with its dataset says what the run does (one step on tiny data).
synthetic det.h5
"$mpirun" --oversubscribe -np 2 "$meridian" train --config "$src/jobs/configs/detect-synthetic.yaml" --data "$tmp/det.h5" \
  --set data.image_size=96 --set train.steps=1 --set train.batch=2 --run-dir "$tmp/det" \
  >"$tmp/o" 2>&1 || { cat "$tmp/o"; fail "detect with data.image_size 96 exited $?"; }
grep -qF "data.image_size 96 differs from the dataset's 64 px images ($tmp/det.h5): they are letterboxed to 96 px on load" "$tmp/o" ||
  { cat "$tmp/o"; fail "no warning for data.image_size"; }
# eval and predict check the keys they are given with --set against the checkpoint's task.
ck=$(ls "$tmp"/det/checkpoints/step_*.h5 | tail -1)
"$mpirun" --oversubscribe -np 2 "$meridian" eval --checkpoint "$ck" --data "$tmp/det.h5" --set task.confx=0.5 >"$tmp/o" 2>&1; rc=$?
[[ $rc -eq 2 ]] && grep -qF -- "--set: field 'task.confx': unknown key; did you mean 'task.conf'?" "$tmp/o" ||
  { cat "$tmp/o"; fail "eval --set task.confx: exit $rc"; }
"$mpirun" --oversubscribe -np 2 "$meridian" prep synthetic --count 32 --size 32 --vocab-size 300 --context-length 16 \
  --out "$tmp/it.h5" --log-level warn >/dev/null || fail "prep image-text"
"$mpirun" --oversubscribe -np 2 "$meridian" train --config "$src/jobs/configs/demo.yaml" --data "$tmp/it.h5" \
  --set train.steps=1 --set train.batch=4 --set model.vocab_size=200 --set model.context_length=8 --set checkpoint.at_end=false --set train.eval_at_start=false \
  --run-dir "$tmp/it" >"$tmp/o" 2>&1 || { cat "$tmp/o"; fail "siglip on 32 px data exited $?"; }
for want in "model.image_size 128 differs from the dataset's 32x32 px images ($tmp/it.h5): they are resized to 128 px on the device" \
            "model.vocab_size 200 is below the dataset tokenizer's 300 ($tmp/it.h5): the model gets 300" \
            "model.context_length 8 is below the dataset's 16 tokens per caption ($tmp/it.h5): longer captions are cut, their eos kept last"; do
  grep -qF "$want" "$tmp/o" || { cat "$tmp/o"; fail "no warning '$want'"; }
done
echo PASS
