#!/usr/bin/env bash
# Usage: fp16_mpi_test.sh MPIRUN MERIDIAN SOURCE_DIR — train.precision fp16 (autocast in float16,
# float32 master weights, a dynamic loss scale) through `meridian train`:
#  1. every task, 50 steps on 2 ranks from the same seed and data as float32: the last loss within 3 %
#     of float32's (measured: lm 0.3 %, SigLIP 0.6 %, detect 0.1 %) and not equal to it (fp16 in
#     effect); the log names the loss scale. Detect starts at train.loss_scale_init 1024: YOLO's summed
#     box losses overflow float16 at GradScaler's 65536 for its first steps (skipped, as Ultralytics'
#     GradScaler skips them), and a run three updates behind would compare the scaler's warm-up, not
#     fp16's precision;
#  2. PyTorch's own torch.amp.GradScaler (tests/train/gradscaler_check.py) on the same Llama (made by
#     transformers), data order and injected overflows (MERIDIAN_TEST_OVERFLOW_STEPS): the same loss
#     scale after every step, the same skipped steps, the same losses and unscaled gradient norms to
#     fp16's rounding, the same parameters to rounding (and a step's update dropped is told apart);
#  3. exact resume across back-offs: lm-tiny on 2 ranks, overflows at steps 7 and 8, stopped at 5 and
#     resumed: /model, /optim and /loss_scale and every logged loss scale bit-identical to 12 straight
#     steps; resumed on 1 rank instead (elastic): the same loss scale and skipped steps step by step,
#     the model to rounding;
#  4. `eval` of an fp16 checkpoint runs in fp16 and says so; train.precision auto says what it chose
#     and why, and the checkpoint's config holds the choice; a bad train.loss_scale exits 2 naming it.
set -u
mpirun=$1 meridian=$2 src=$3
source "$(dirname "$0")/../mpi_script_lib.sh"
synthetic text.h5 it.h5 det.h5
command -v h5diff >/dev/null || fail "h5diff missing (hdf5-tools)"

# run NAME NP CONFIG DATA [--set ...]: 50 steps x batch 4 per rank, logged every step.
run() {
  local name=$1 np=$2 config=$3 data=$4
  shift 4
  "$mpirun" --oversubscribe -np "$np" "$meridian" train --config "$src/jobs/configs/$config" --data "$tmp/$data" \
    --set train.batch=4 --set train.steps=50 --set train.health_every=0 --set train.log_every=1 \
    --set train.report=false --run-dir "$tmp/$name" "$@" >"$tmp/$name.log" 2>&1 ||
    { tail -30 "$tmp/$name.log"; fail "train $name $* exited"; }
}
last_loss() { grep -oE 'train: [0-9]+ steps, loss [0-9.]+ -> [0-9.]+' "$tmp/$1.log" | grep -oE '[0-9.]+$'; }

# 1. Every task: fp16 within 3 % of float32 after 50 steps.
task() {
  local config=$1 data=$2
  shift 2
  local name=${config%.yaml}
  run "$name-f32" 2 "$config" "$data" "$@"
  run "$name-f16" 2 "$config" "$data" --set train.precision=fp16 "$@"
  grep -q "fp16 autocast" "$tmp/$name-f16.log" || fail "$name: the fp16 run does not say fp16 autocast"
  grep -q "fp16: dynamic loss scale" "$tmp/$name-f16.log" || fail "$name: the fp16 run does not name its loss scale"
  python3 - "$(last_loss "$name-f32")" "$(last_loss "$name-f16")" "$name" <<'PY' || exit 1
import sys
f, h, name = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
d = abs(h - f) / f
print(f"{name}: loss after 50 steps float32 {f}, fp16 {h}: {100 * d:.2f} % apart (tolerance 3 %)")
if d > 0.03:
    sys.exit(print(f"FAIL: {name}: fp16 loss beyond 3 % of float32's") or 1)
if h == f:
    sys.exit(print(f"FAIL: {name}: fp16 ends at float32's loss to the last digit: fp16 is not in effect") or 1)
PY
}
task lm-tiny.yaml text.h5 --set data.seq_len=64 --set optim.lr=3e-3 --set optim.warmup=1
task siglip-tiny.yaml it.h5 --set model.image_size=32 --set model.patch=8 --set model.embed=64 \
  --set model.vision.width=64 --set model.vision.depth=2 --set model.vision.heads=2 \
  --set model.text.width=64 --set model.text.depth=2 --set model.text.heads=2
task detect-synthetic.yaml det.h5 --set train.ema=0 --set optim.warmup=1 --set data.augment=false \
  --set data.image_size=32 --set train.loss_scale_init=1024

# 2. Against torch.amp.GradScaler on the same Llama, data and overflows (1 rank: one loss per batch).
python3 "$src/tests/models/hf_llama.py" make "$tmp/hf" --seed 3 --dtype f32 --tie --shape 64,172,2,4,2,600 \
  >"$tmp/make.log" 2>&1 || { cat "$tmp/make.log"; fail "transformers could not make a model"; }
cat >"$tmp/gs.yaml" <<'YAML'
task: {name: lm}
train: {batch: 4, steps: 16, log_every: 1, health_every: 0, report: false, precision: fp16, loss_scale_init: 256,
  loss_scale_growth_interval: 3, record_samples: true, seed: 1}
data: {seq_len: 64}
optim: {lr: 3.0e-3, min_lr: 3.0e-3, warmup: 0, weight_decay: 0, clip: 1.0}
checkpoint: {at_end: true}
YAML
MERIDIAN_TEST_OVERFLOW_STEPS=5,6,11 "$mpirun" -x MERIDIAN_TEST_OVERFLOW_STEPS -np 1 "$meridian" train \
  --config "$tmp/gs.yaml" --data "$tmp/text.h5" --init "$tmp/hf" --run-dir "$tmp/gs" >"$tmp/gs.log" 2>&1 ||
  { tail -20 "$tmp/gs.log"; fail "the fp16 run from the transformers model exited"; }
grep -q "3 skipped by the loss scale" "$tmp/gs.log" || { tail "$tmp/gs.log"; fail "the summary does not count 3 skips"; }
grep -q "loss scale 512 -> 256 at step 5: inf/NaN gradients, step skipped (1 so far)" "$tmp/gs.log" ||
  { grep "loss scale" "$tmp/gs.log"; fail "no back-off line for step 5"; }
"$mpirun" -np 1 "$meridian" export --model "$tmp/gs/checkpoints/step_00000016.h5" --out "$tmp/gsx" \
  >"$tmp/export.log" 2>&1 || { cat "$tmp/export.log"; fail "export exited"; }
python3 "$src/tests/train/gradscaler_check.py" "$tmp/hf" "$tmp/text.h5" 64 "$tmp/gs" "$tmp/gsx" 256 3 3e-3 1.0 5,6,11 \
  2>"$tmp/check.err" || { tail "$tmp/check.err"; fail "meridian's fp16 differs from torch.amp.GradScaler's"; }

# 3. Exact resume across back-offs (injected on every rank at steps 7 and 8; the scale grows every 2, from 256:
# far below where the gradients overflow float16 by themselves, which rounding on 1 rank could tip).
lm() {  # lm NAME NP [--set ...]: lm-tiny fp16, 12 steps of global batch 8, a checkpoint every 5; overflows at
        # $overflows (default 7,8)
  local name=$1 np=$2
  shift 2
  MERIDIAN_TEST_OVERFLOW_STEPS=${overflows:-7,8} "$mpirun" --oversubscribe -x MERIDIAN_TEST_OVERFLOW_STEPS -np "$np" "$meridian" \
    train --config "$src/jobs/configs/lm-tiny.yaml" --data "$tmp/text.h5" --set data.seq_len=64 \
    --set train.batch=$((8 / np)) --set train.steps=12 --set train.log_every=1 --set train.health_every=0 \
    --set train.report=false --set train.precision=fp16 --set train.loss_scale_init=256 --set train.loss_scale_growth_interval=2 \
    --set optim.lr=3e-3 --set optim.warmup=1 --set checkpoint.every_steps=5 --set checkpoint.keep_last=10 \
    --run-dir "$tmp/$name" "$@" >>"$tmp/$name.log" 2>&1 || { tail -20 "$tmp/$name.log"; fail "train $name $* exited"; }
}
scales() {  # scales RUN [FIRST]: "step:scale" per step from FIRST (default 1), the last logged value of each
  python3 - "$tmp/$1/metrics.csv" "${2:-1}" <<'PY'
import csv, sys
v = {}
for r in csv.DictReader(open(sys.argv[1])):
    if r["name"] == "train/loss_scale" and int(r["step"]) >= int(sys.argv[2]):
        v[int(r["step"])] = r["value"]
print(" ".join(f"{s}:{v[s]}" for s in sorted(v)))
PY
}
lm straight 2
lm split 2 --set train.stop_at=5
lm split 2 --resume auto
grep -q "loss scale 2048 -> 1024 at step 7" "$tmp/split.log" ||
  { grep "loss scale" "$tmp/split.log"; fail "the resumed window has no back-off at step 7"; }
for group in model optim loss_scale; do
  h5diff -r "$tmp/straight/checkpoints/step_00000012.h5" "$tmp/split/checkpoints/step_00000012.h5" "/$group" "/$group" \
    >"$tmp/diff" 2>&1 || { head -10 "$tmp/diff"; fail "fp16 resumed at step 5: /$group differs from 12 straight steps"; }
done
[[ $(scales straight) == "$(scales split)" ]] || fail "loss scales differ: $(scales straight) vs $(scales split)"
echo "ok: fp16 stopped at 5, resumed across the back-offs at 7 and 8: /model, /optim, /loss_scale bit-identical;" \
  "loss scales $(scales straight)"
mkdir -p "$tmp/elastic/checkpoints"
cp "$tmp/split/checkpoints/step_00000005.h5" "$tmp/elastic/checkpoints/"
lm elastic 1 --resume "$tmp/elastic/checkpoints/step_00000005.h5"
[[ $(scales straight 6) == "$(scales elastic)" ]] || fail "2 -> 1 ranks: loss scales differ: $(scales elastic)"
python3 - "$tmp/straight/checkpoints/step_00000012.h5" "$tmp/elastic/checkpoints/step_00000012.h5" <<'PY' ||
import sys
import h5py
import numpy as np
worst = 0.0
with h5py.File(sys.argv[1], "r") as a, h5py.File(sys.argv[2], "r") as b:
    for name, d in a["model"].items():
        if d.dtype.kind == "f":
            x, y = d[()].astype(np.float64), b["model"][name][()].astype(np.float64)
            worst = max(worst, float(np.abs(x - y).max() / max(np.abs(x).max(), 1e-12)))
print(f"2 -> 1 ranks: /model within {worst:.1e} of the straight run's (relative to each tensor's largest value)")
sys.exit(0 if worst <= 1e-3 else 1)
PY
  fail "2 -> 1 ranks: /model beyond rounding of the straight run's"
echo "ok: resumed on 1 rank: the same loss scales and skipped steps; /model within 0.1 % of the straight run's"

# Every strategy and feature the other precisions run with: the injected overflow at step 3 skipped
# on every rank, the losses of the ZeRO stages those of DDP (to the 4 digits printed).
matrix() {  # matrix NAME [--set ...]
  local name=$1
  shift
  lm "$name" 2 --set train.steps=4 --set checkpoint.every_steps=0 "$@"
  grep -q "1 skipped by the loss scale" "$tmp/$name.log" || { tail "$tmp/$name.log"; fail "$name: not 1 skip"; }
  grep -oE 'train: 4 steps, loss [0-9.]+ -> [0-9.]+' "$tmp/$name.log"
}
overflows=3
ddp=$(matrix m-ddp) || exit 1
[[ -n $ddp ]] || fail "fp16 with DDP: no loss summary"
for variant in "optim.zero=1" "optim.zero=2" "optim.zero=3 optim.offload=true train.activation_checkpointing=true"; do
  sets=()
  for kv in $variant; do sets+=(--set "$kv"); done
  got=$(matrix "m-${variant%% *}" "${sets[@]}") || exit 1
  [[ $got == "$ddp" ]] || fail "fp16 with $variant: $got vs DDP's $ddp"
done
matrix m-lora --set task.lora.rank=4 >/dev/null || exit 1
matrix m-fp16-wire --set comm.grad_dtype=fp16 >/dev/null || exit 1
matrix m-accumulate --set train.accumulate=2 --set train.batch=2 >/dev/null || exit 1
echo "ok: fp16 with ZeRO-1/2/3 (offload, activation checkpointing) as DDP ($ddp), LoRA, comm.grad_dtype fp16, accumulation"

# 4. eval in fp16; auto; a bad key.
out=$("$mpirun" --oversubscribe -np 2 "$meridian" eval --model "$tmp/straight/checkpoints/step_00000012.h5" \
  --data "$tmp/text.h5" 2>&1) || { echo "$out" | tail; fail "eval of the fp16 checkpoint exited"; }
grep -q "in fp16 (train.precision)" <<<"$out" || fail "eval does not say it runs in fp16"
"$mpirun" --oversubscribe -np 2 "$meridian" train --config "$src/jobs/configs/lm-tiny.yaml" --data "$tmp/text.h5" \
  --set data.seq_len=64 --set train.steps=2 --set train.precision=auto --set checkpoint.at_end=true \
  --run-dir "$tmp/auto" >"$tmp/auto.log" 2>&1 || { tail "$tmp/auto.log"; fail "train.precision auto exited"; }
chosen=$(grep -oE "train.precision auto: (bf16|float32) \(this CPU has [^)]*\)" "$tmp/auto.log" | head -1)
[[ -n $chosen ]] || { grep -i precision "$tmp/auto.log"; fail "auto does not say what it chose and why"; }
want=$(grep -qE 'avx512_bf16|amx_bf16' /proc/cpuinfo && echo bf16 || echo float32)
grep -q "auto: $want " <<<"$chosen" || fail "auto chose '$chosen' on a CPU that says $want"
grep -qE "^  precision: $want$" "$tmp/auto/config.yaml" || fail "the run's config does not hold the chosen precision"
echo "ok: $chosen"
expect_error "train.loss_scale abc" "field 'train.loss_scale': must be dynamic or a positive number within float32's range, got 'abc'" \
  "$mpirun" --oversubscribe -np 2 "$meridian" train --config "$src/jobs/configs/lm-tiny.yaml" --data "$tmp/text.h5" \
  --set train.precision=fp16 --set train.loss_scale=abc
echo PASS
