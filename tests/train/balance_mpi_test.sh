#!/usr/bin/env bash
# Usage: balance_mpi_test.sh MPIRUN MERIDIAN SOURCE_DIR — uneven batch shares (train.balance), through
# `meridian train`:
#  - for each task (lm-tiny; SigLIP tiny, whose loss gathers the embeddings of every rank; the detector
#    (YOLO11n) with SyncBN) at 2 and 3 ranks, and SigLIP with 2 micro-batches per step (train.accumulate): one SGD step (no clipping, so the update is lr x the gradient) with
#    the shares 6,2 (7,3,2) gives the update of the even split of the same samples, to float rounding:
#    measured 1e-6 of the largest update for lm and SigLIP, 8e-4 for the detector (a 1-rank run of the
#    whole batch is as far from the even split: BatchNorm's backward subtracts means). A loss normalised by
#    the rank's own count instead of the global one is off by tens of percent;
#  - train.balance auto with rank 1 made slow (--inject-straggler) moves the shares at step 2 (step log
#    and health report show them; health still names rank 1 a straggler: one sample is still slow); stopped
#    at step 4 and resumed, the run is bit-identical (/model, /optim) to the uninterrupted one, with the
#    same share history; resumed on 4 ranks it starts from even shares;
#  - a bad setting exits 2 on every rank naming the key (every bad value: tests/train/balance_test.cpp).
set -u
mpirun=$1 meridian=$2 src=$3
source "$(dirname "$0")/../mpi_script_lib.sh"
synthetic text.h5 it.h5 det.h5

# run NP NAME CONFIG DATA [--set ...]: batch 4 per rank, a checkpoint every step, no health reports.
run() {
  local np=$1 name=$2 config=$3 data=$4
  shift 4
  "$mpirun" --oversubscribe -np "$np" "$meridian" train --config "$src/jobs/configs/$config" --data "$tmp/$data" \
    --set train.batch=4 --set checkpoint.every_steps=1 --set checkpoint.keep_last=10 --set train.health_every=0 \
    --set train.log_every=1 --run-dir "$tmp/$name" "$@" >"$tmp/$name.log" 2>&1 ||
    { tail -30 "$tmp/$name.log"; fail "train $name $* exited"; }
}
ck() { echo "$tmp/$1/checkpoints/step_0000000$2.h5"; }

# same_update NAME ZERO EVEN UNEVEN TOLERANCE: the two updates from ZERO's weights differ by at most
# TOLERANCE x the largest of them.
same_update() {
  python3 - "$@" <<'PY' || fail "$1: the uneven shares' update is not the even split's"
import sys, h5py, numpy as np
name, tol = sys.argv[1], float(sys.argv[5])
zero, even, uneven = (h5py.File(p, "r")["model"] for p in sys.argv[2:5])
names = []
zero.visit(lambda n: names.append(n) if isinstance(zero[n], h5py.Dataset) else None)
top = worst = 0.0
for n in names:
    w0, we, wu = (f[n][()].astype(np.float64) for f in (zero, even, uneven))
    top, worst = max(top, np.abs(we - w0).max()), max(worst, np.abs(wu - we).max())
print(f"{name}: largest update {top:.3e}, largest difference uneven - even {worst:.3e}: {worst / top:.1e} of it "
      f"(tolerance {tol:g})")
sys.exit(0 if top > 0 and worst <= tol * top else 1)
PY
}

# 1. Uneven shares, the even split's update.
step=(--set train.steps=1 --set optim.name=sgd --set optim.clip=0 --set optim.warmup=1)
equal_updates() {  # equal_updates CONFIG DATA TOLERANCE NPS [--set ...]
  local config=$1 data=$2 tolerance=$3 nps=$4
  shift 4
  local name=${config%.yaml}
  run 2 "$name-zero" "$config" "$data" "${step[@]}" --set optim.lr=1e-30 --set optim.min_lr=0 "$@"
  for np in $nps; do
    local shares=${SHARES2:-6,2}
    [[ $np == 3 ]] && shares=7,3,2
    run $np "$name-even$np" "$config" "$data" "${step[@]}" --set optim.lr=1e-2 "$@"
    run $np "$name-uneven$np" "$config" "$data" "${step[@]}" --set optim.lr=1e-2 --set train.balance_shares=$shares "$@"
    grep -q "batch shares from the start: rank 0: ${shares%%,*} of" "$tmp/$name-uneven$np.log" ||
      fail "$name: the log does not show the shares $shares"
    same_update "$name np $np shares $shares" "$(ck "$name-zero" 1)" "$(ck "$name-even$np" 1)" \
      "$(ck "$name-uneven$np" 1)" "$tolerance"
  done
}
equal_updates lm-tiny.yaml text.h5 1e-4 "2 3" --set data.seq_len=64
equal_updates siglip-tiny.yaml it.h5 1e-4 "2 3" --set model.image_size=64
# YOLO11n: YOLO12n as Ultralytics 8.4 builds it (no grouped convolutions in layers 1 and 3) lands 2-6e-3
# of the largest update from the even split with every uneven share tried (one rank: 4.5e-4; its loss
# equal to 6 digits; YOLO11n and YOLOv8n 0.6-2e-4), not yet explained: docs/performance.md, issue 53.
equal_updates detect-synthetic.yaml det.h5 3e-3 "2 3" --set train.ema=0 --set model.sync_bn=true \
  --set model.yaml=yolo11n.yaml
# With 2 micro-batches per step: the shares apply to each (batch 2 per rank per micro-batch).
SHARES2=3,1 equal_updates siglip-tiny.yaml it.h5 1e-4 2 --set model.image_size=64 --set train.accumulate=2 \
  --set train.batch=2

# 2. train.balance auto, shares moved by a slow rank 1; stopped and resumed: the same bits.
# Rank 1 sleeps 1.5 s in every forward: at step 2 it measures about 0.4 s per sample against rank 0's
# 0.01-0.03, so its proportional share is below 1 sample and the shares go to 7,1 (they would with
# rank 0 twice as slow), and stay there.
auto=(--set model.image_size=64 --set train.steps=6 --set train.balance=auto --set train.balance_every=2
  --inject-straggler 1:compute:1500)
run 2 straight siglip-tiny.yaml it.h5 "${auto[@]}" --set train.health_every=2
grep -q "batch shares at step 2: rank 0: 7 of 8 (88 %), [0-9.]* x median speed, rank 1: 1 of 8" "$tmp/straight.log" ||
  { grep "shares" "$tmp/straight.log"; fail "balance auto did not move the shares to 7,1 at step 2"; }
grep -qE "step +3/6 .*shares 88/12 %" "$tmp/straight.log" || fail "the step log does not show the shares"
grep -q "health at step 4: batch shares rank 0: 7 of 8" "$tmp/straight.log" || fail "the health report lacks the shares"
# At one sample of 8, rank 1 is still slower than the others: health still names it.
grep -qE "health at step [46]: straggler: rank 1 " "$tmp/straight.log" ||
  fail "a rank slower than its smallest share absorbs is not named a straggler"
run 2 split siglip-tiny.yaml it.h5 "${auto[@]}" --set train.stop_at=3
run 2 split siglip-tiny.yaml it.h5 "${auto[@]}" --resume auto
grep -q "batch shares from the start: rank 0: 7 of 8" "$tmp/split.log" || fail "the resumed run lost the shares"
for group in model optim; do
  h5diff -r "$(ck straight 6)" "$(ck split 6)" "/$group" "/$group" >"$tmp/diff" 2>&1 ||
    { head -10 "$tmp/diff"; fail "balance auto, resumed at step 3: /$group differs from 6 straight steps"; }
done
echo "ok: balance auto moved the shares to 7,1 at step 2; stopped at 3 and resumed: bit-identical to 6 straight steps"
mkdir -p "$tmp/elastic/checkpoints" && cp "$(ck split 3)" "$tmp/elastic/checkpoints/"
run 4 elastic siglip-tiny.yaml it.h5 --set model.image_size=64 --set train.steps=4 --set train.batch=2 --set train.balance=auto \
  --resume auto
grep -q "batch shares were for 2 ranks and another batch or world size: even shares, measured again" \
  "$tmp/elastic.log" || fail "a resume on 4 ranks does not say it starts from even shares"
! grep -q "batch shares from the start" "$tmp/elastic.log" || fail "a resume on 4 ranks kept 2 ranks' shares"
echo "ok: resumed on 4 ranks (batch 2): even shares"

# 3. Bad settings: exit 2 on every rank, naming the key (each key's bad values: tests/train/balance_test.cpp).
expect_error train.balance_shares=5,2 "train.balance_shares.*sum to 7, not the global micro-batch 8" \
  "$mpirun" --oversubscribe -np 2 "$meridian" train --config "$src/jobs/configs/lm-tiny.yaml" --data "$tmp/text.h5" \
  --set data.seq_len=64 --set train.batch=4 --set train.steps=1 --set train.balance_shares=5,2 --run-dir "$tmp/bad"
[[ -e $tmp/bad/config.yaml ]] && fail "a run directory was written for a bad setting"
echo "PASS"
