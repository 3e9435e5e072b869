#!/usr/bin/env bash
# Usage: bf16_mpi_test.sh MPIRUN MERIDIAN SOURCE_DIR — train.precision bf16 for every task, through
# `meridian train` on 2 ranks (lm-tiny, SigLIP tiny with the published architecture's pooling head, the
# detector n), each from the same seed and data:
#  - 8 steps in bf16 end at a loss within 3 % of the float32 run's (measured: lm 0.03 %, SigLIP 0.2 %,
#    detect 0.7 %; bf16 keeps 8 bits of mantissa; a loss computed in bf16, an update lost to rounding,
#    a cast in the wrong place moves it by more, or gives NaN), a band that 8 steps of float32 move the
#    loss out of, and not at float32's loss exactly (bf16 in effect);
#  - bf16 4 steps, stopped, resumed for 4 more: /model and /optim bit-identical to the 8 straight steps
#    (autocast's cached weight casts cleared every step; nothing of the bf16 path outside the checkpoint);
#  - `eval` of the bf16 checkpoint runs in bf16 (train.precision) and prints exactly the metrics that
#    training's last evaluation logged; `--set train.precision=float32` evaluates it in float32, a
#    different result; `predict`, `embed` and `generate` run in bf16 and say so;
#  - every bf16 run logs its path on this CPU and the measured bf16 peak its MFU is against; `bench
#    gemm` prints a row per rank.
set -u
mpirun=$1 meridian=$2 src=$3
source "$(dirname "$0")/../mpi_script_lib.sh"
synthetic text.h5 it.h5 det.h5

# run NAME CONFIG DATA [--set ...]: 8 steps on 2 ranks x batch 4, a checkpoint every 4, an eval at the end.
run() {
  local name=$1 config=$2 data=$3
  shift 3
  "$mpirun" --oversubscribe -np 2 "$meridian" train --config "$src/jobs/configs/$config" --data "$tmp/$data" \
    --set data.eval="$tmp/$data" --set train.batch=4 --set train.steps=8 --set checkpoint.every_steps=4 \
    --set checkpoint.keep_last=10 --set train.health_every=0 --set train.log_every=1 --run-dir "$tmp/$name" "$@" \
    >"$tmp/$name.log" 2>&1 || { tail -30 "$tmp/$name.log"; fail "train $name $* exited"; }
}
# losses NAME: the first and the last step's loss of the run (4 decimals, as the summary prints them).
losses() { grep -oE 'train: [0-9]+ steps, loss [0-9.]+ -> [0-9.]+' "$tmp/$1.log" | grep -oE '[0-9.]+ -> [0-9.]+$' | sed 's/ -> / /'; }
ck() { echo "$tmp/$1/checkpoints/step_0000000$2.h5"; }

# task CONFIG DATA TOLERANCE [--set ...]: the three checks above; TOLERANCE: |bf16 - f32| / f32 at most.
task() {
  local config=$1 data=$2 tolerance=$3
  shift 3
  local name=${config%.yaml}
  run "$name-f32" "$config" "$data" "$@"
  run "$name-bf16" "$config" "$data" --set train.precision=bf16 "$@"
  grep -q "bf16 autocast" "$tmp/$name-bf16.log" || fail "$name: the bf16 run does not say bf16 autocast"
  grep -qE "bf16 on CPU: bf16 GEMMs at [0-9.]+ GFLOP/s per rank" "$tmp/$name-bf16.log" ||
    fail "$name: the bf16 run does not say which path bf16 takes on this CPU"
  grep -qE "MFU against [0-9.]+ GFLOP/s per device \(measured: [0-9]+\^3 bf16 GEMM" "$tmp/$name-bf16.log" ||
    fail "$name: the bf16 run does not name the bf16 peak its MFU is against"
  grep -qE "step +8/8 .* MFU [0-9.]+%" "$tmp/$name-bf16.log" || fail "$name: no MFU in the step log"
  # The band means something only where 8 steps move the loss by more than it (an update lost to
  # rounding leaves the loss where it started), and bf16 is in effect only where it changes the result
  # (the same run without autocast gives float32's loss to the last bit: same seed, data and threads).
  local f32 bf16
  f32=$(losses "$name-f32") bf16=$(losses "$name-bf16")
  [[ -n $f32 && -n $bf16 ]] || fail "$name: no loss summary"
  python3 - $f32 $bf16 "$tolerance" "$name" <<'PY' || exit 1
import sys
f0, f, b0, b, t = map(float, sys.argv[1:6])
name = sys.argv[6]
d, moved = abs(b - f) / f, abs(f0 - f) / f
print(f"{name}: loss after 8 steps float32 {f}, bf16 {b}: {100 * d:.2f} % apart (tolerance {100 * t:.0f} %); "
      f"8 steps moved float32's by {100 * moved:.1f} %")
if d > t:
    sys.exit(print(f"FAIL: {name}: bf16 loss beyond the tolerance of float32's") or 1)
if moved <= t:
    sys.exit(print(f"FAIL: {name}: 8 steps move the loss by {100 * moved:.1f} %, within the {100 * t:.0f} % band") or 1)
if b == f:
    sys.exit(print(f"FAIL: {name}: bf16 ends at float32's loss to the last digit: bf16 is not in effect") or 1)
PY
  # Stopped after 4 and resumed: the same bits as 8 straight.
  run "$name-split" "$config" "$data" --set train.precision=bf16 --set train.stop_at=4 "$@"
  run "$name-split" "$config" "$data" --set train.precision=bf16 --resume auto "$@"
  for group in model optim; do
    h5diff -r "$(ck "$name-bf16" 8)" "$(ck "$name-split" 8)" "/$group" "/$group" >"$tmp/diff" 2>&1 ||
      { head -10 "$tmp/diff"; fail "$name: bf16 resumed at step 4: /$group differs from 8 straight steps"; }
  done
  echo "ok: $name: bf16 stopped at 4 and resumed: /model and /optim bit-identical to 8 straight steps"
  # eval in bf16 as training evaluated; in float32 on request.
  local logged evald f32_eval
  logged=$(grep -oE 'eval at step 8 \([0-9.]+ s\): .*' "$tmp/$name-bf16.log" | sed -E 's/.*\): +//')
  evald=$("$mpirun" --oversubscribe -np 2 "$meridian" eval --model "$(ck "$name-bf16" 8)" --data "$tmp/$data" 2>&1) ||
    { echo "$evald" | tail; fail "$name: eval of the bf16 checkpoint exited"; }
  grep -q "in bf16 (train.precision)" <<<"$evald" || fail "$name: eval does not say it runs in bf16"
  python3 - "$logged" "$(grep -E '^eval: ' <<<"$evald" | tail -1)" <<'PY' || fail "$name: eval in bf16 differs from training's evaluation"
import re, sys
pairs = lambda t: {k: float(v) for k, v in re.findall(r"(\w+) ([0-9.eE+-]+)", t)}
logged, evald = pairs(sys.argv[1]), pairs(sys.argv[2].removeprefix("eval: "))
common = set(logged) & set(evald)  # detect: eval prints more of COCO's metrics, training fewer
assert len(common) >= 2, (logged, evald)
# Both printed rounded (training's log to 4 significant digits, eval's to 2 decimals).
for k in common:
    assert abs(logged[k] - evald[k]) <= 0.006 * max(1.0, abs(logged[k])), (k, logged[k], evald[k])
print("ok: eval in bf16 =", sys.argv[2])
PY
  f32_eval=$("$mpirun" --oversubscribe -np 2 "$meridian" eval --model "$(ck "$name-bf16" 8)" --data "$tmp/$data" \
    --set train.precision=float32 2>&1) || { echo "$f32_eval" | tail; fail "$name: eval in float32 exited"; }
  grep -q "in bf16" <<<"$f32_eval" && fail "$name: --set train.precision=float32 still evaluates in bf16"
  echo "ok: $name: eval in float32: $(grep -E '^eval: ' <<<"$f32_eval" | tail -1)"
}

task lm-tiny.yaml text.h5 0.03 --set data.seq_len=64 --set optim.lr=3e-3 --set optim.warmup=1
task siglip-tiny.yaml it.h5 0.03 --set model.image_size=64
# warmup 1: with the preset's 100 steps of warmup, 8 steps moved the loss by 1.3 %, inside the band.
task detect-synthetic.yaml det.h5 0.03 --set train.ema=0 --set optim.warmup=1

# The inference commands in bf16.
out=$("$mpirun" --oversubscribe -np 2 "$meridian" generate --model "$(ck lm-tiny-bf16 8)" --prompt "Name a colour." \
  --max-new-tokens 8 2>&1) || { echo "$out" | tail; fail "generate in bf16 exited"; }
grep -q "in bf16" <<<"$out" || fail "generate does not say it runs in bf16"
python3 "$src/tests/docs/standins.py" "$tmp/standins" >/dev/null || fail "standins.py failed"
ln -s "$tmp/standins/AID/Airport" "$tmp/images"  # 4 PNG files
out=$("$mpirun" --oversubscribe -np 2 "$meridian" predict --model "$(ck detect-synthetic-bf16 8)" --images "$tmp/images" \
  --out "$tmp/pred" 2>&1) || { echo "$out" | tail; fail "detect predict in bf16 exited"; }
grep -q "in bf16" <<<"$out" || fail "predict does not say it runs in bf16"
out=$("$mpirun" --oversubscribe -np 2 "$meridian" embed --model "$(ck siglip-tiny-bf16 8)" --images "$tmp/images" \
  --out "$tmp/emb.h5" 2>&1) || { echo "$out" | tail; fail "embed in bf16 exited"; }
grep -q "in bf16" <<<"$out" || fail "embed does not say it runs in bf16"
echo "ok: generate, predict and embed run in bf16"

# bench gemm: a row per rank, float32 and bf16 rates, and the peak train's MFU uses.
out=$("$mpirun" --oversubscribe -np 2 "$meridian" bench gemm --size 256 --iters 2 2>&1) ||
  { echo "$out"; fail "bench gemm exited"; }
echo "$out"
[[ $(grep -cE '^ +[01] +[^ ]+ +cpu +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$' <<<"$out") == 2 ]] ||
  fail "bench gemm: not one row per rank with both rates"
grep -qE "^MFU peak per device: float32 [0-9.]+ GFLOP/s .*; bf16 [0-9.]+ GFLOP/s" <<<"$out" ||
  fail "bench gemm: no MFU peak line"
# A peak measured while another process keeps a core busy (a busy loop here) says so: one rank has no
# other to take the best of, and its MFU would read high.
bash -c 'while :; do :; done' &
busy=$!
out=$("$mpirun" --oversubscribe -np 1 "$meridian" bench gemm --size 64 --iters 1 2>&1)
rc=$?
kill "$busy"
[[ $rc == 0 ]] || { echo "$out"; fail "bench gemm beside a busy loop exited $rc"; }
grep -qE "measured under load: other processes kept up to [0-9.]+ cores busy" <<<"$out" ||
  { echo "$out"; fail "bench gemm: a peak measured beside a busy loop does not say it was measured under load"; }
echo "ok: $(grep -oE "measured under load: other processes kept up to [0-9.]+ cores busy" <<<"$out" | head -1)"
expect_error "train.precision fp8" "field 'train.precision': expected one of float32, bf16, fp16 or auto, got 'fp8'" \
  "$mpirun" --oversubscribe -np 2 "$meridian" train --config "$src/jobs/configs/lm-tiny.yaml" --data "$tmp/text.h5" \
  --set train.precision=fp8
expect_error "bench gemm --iters 0" "--iters must be at least 1" "$mpirun" --oversubscribe -np 2 "$meridian" bench gemm --iters 0
echo PASS
