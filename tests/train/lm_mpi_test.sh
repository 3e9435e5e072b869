#!/usr/bin/env bash
# Usage: lm_mpi_test.sh MPIRUN MERIDIAN SOURCE_DIR — language-model SFT end to end on 2 ranks: a
# synthetic instruction dataset, the lm-tiny preset (Llama-style, GQA, tied head), 60 steps; the
# loss starts near ln(vocab) and falls, the evaluation loss falls from before to after, and 30 steps
# + resume + 30 steps equals 60 straight (model and optimizer state, h5diff).
set -u
mpirun=$1 meridian=$2 src=$3
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$mpirun" --oversubscribe -np 2 "$meridian" prep synthetic --kind text --count 300 --out "$tmp/text.h5" --log-level warn \
  >/dev/null || fail "prep exited $?"
train() {
  "$mpirun" --oversubscribe -np 2 "$meridian" train --config "$src/jobs/configs/lm-tiny.yaml" --data "$tmp/text.h5" \
    --set train.batch=4 --set data.seq_len=128 --set train.steps=60 --set optim.lr=3e-3 --set optim.warmup=5 \
    --set train.log_every=10 "$@"
}
out=$(train --set data.eval="$tmp/text.h5" --set train.eval_at_start=true --run-dir "$tmp/a" 2>&1) || { echo "$out"; fail "train exited"; }
echo "$out" | grep -E "^train:|^eval"
python3 - "$out" <<'PY' || fail "the language model did not learn"
import math, re, sys
out = sys.argv[1]
m = re.search(r"train: 60 steps, loss ([0-9.]+) -> ([0-9.]+)", out)
assert m, "no summary"
first, last = float(m.group(1)), float(m.group(2))
vocab = int(re.search(r"vocab_size \d+ raised to the dataset tokenizer's (\d+)|", out).group(1) or 512)
assert abs(first - math.log(vocab)) < 0.5, (first, vocab)  # an untrained model is near uniform
assert last < 0.7 * first, (first, last)
before = float(re.search(r"eval before: eval_loss ([0-9.]+)", out).group(1))
after = float(re.search(r"eval after: eval_loss ([0-9.]+)", out).group(1))
assert after < 0.7 * before, (before, after)
PY
train --run-dir "$tmp/b" --set train.stop_at=30 >"$tmp/b1" 2>&1 || { cat "$tmp/b1"; fail "run to step 30 exited"; }
train --run-dir "$tmp/b" --resume auto >"$tmp/b2" 2>&1 || { cat "$tmp/b2"; fail "resumed run exited"; }
grep -q "resumed from .*step_00000030.h5: step 30" "$tmp/b2" || { cat "$tmp/b2"; fail "did not resume at step 30"; }
for group in /model /optim; do
  h5diff -r "$tmp/a/checkpoints/step_00000060.h5" "$tmp/b/checkpoints/step_00000060.h5" $group $group >"$tmp/diff" \
    || { head "$tmp/diff"; fail "$group differs between straight and resumed"; }
done
# generate: greedy is deterministic, top-p with a seed is reproducible, at most --max-new-tokens.
ckpt="$tmp/a/checkpoints/step_00000060.h5"
gen() { "$meridian" generate --checkpoint "$ckpt" --prompt "Compute the result." --input "12 + 7" --log-level warn "$@" | tail -1; }
g1=$(gen --max-new-tokens 8) && g2=$(gen --max-new-tokens 8) || fail "generate exited $?"
[[ $g1 == "$g2" && $g1 =~ ^generated\ \(([0-8])\ tokens,\ greedy\) ]] || fail "greedy generation: '$g1' vs '$g2'"
s1=$(gen --max-new-tokens 8 --top-p 0.9 --seed 5) && s2=$(gen --max-new-tokens 8 --top-p 0.9 --seed 5) || fail "top-p exited"
[[ $s1 == "$s2" && $s1 == *"top-p"* ]] || fail "top-p generation not reproducible: '$s1' vs '$s2'"
"$meridian" generate --checkpoint "$tmp/none.h5" --prompt x >"$tmp/g" 2>&1 && fail "a missing checkpoint was accepted"
grep -q "none.h5 does not exist" "$tmp/g" || { cat "$tmp/g"; fail "no clear message for a missing checkpoint"; }
echo PASS
