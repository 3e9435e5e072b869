#!/usr/bin/env bash
# Usage: detect_mpi_test.sh MPIRUN MERIDIAN SOURCE_DIR — the detect task end to end on 2 ranks:
#  - synthetic detection data (64 px), YOLO12n at width 0.125 (area attention, DFL head), mosaic
#    augmentation, AdamW + EMA: the loss falls, evaluation before and after gives mAP values, and
#    `meridian eval` on the final checkpoint reproduces the trainer's final mAP and detection count
#    exactly (the EMA weights, BatchNorm statistics the same on every rank, the same distributed
#    evaluation);
#  - 12 steps straight equals 6 + resume + 6 bit for bit (/model, /ema, /optim; SGD with Nesterov
#    momentum; model.sync_bn: BatchNorm statistics over both ranks);
#  - a YOLO-txt dataset on disk (images + labels/*.txt) goes through prep detection, train and
#    predict (drawn images + YOLO txt predictions, one per image; its own outputs inside the image
#    directory are not read back; two images with the same outputs are an error);
#  - clear errors: eval with the wrong --task, predict on a directory without images.
set -u
mpirun=$1 meridian=$2 src=$3
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
run() { "$mpirun" --oversubscribe -np 2 "$meridian" "$@"; }
run prep synthetic --kind detection --count 160 --size 64 --out "$tmp/train.h5" --log-level warn >/dev/null || fail "prep train"
run prep synthetic --kind detection --count 48 --size 64 --seed 7 --out "$tmp/val.h5" --log-level warn >/dev/null || fail "prep val"
train() {
  run train --config "$src/jobs/configs/detect-synthetic.yaml" --data "$tmp/train.h5" --set model.width=0.125 \
    --set train.batch=8 --set train.steps=12 --set optim.warmup=2 --set train.log_every=4 --set train.health_every=0 \
    --set data.close_mosaic=0 --set train.ema_tau=2 --set checkpoint.every_steps=6 "$@"
}

# 1. Training, evaluation, eval CLI.
out=$(train --set data.eval="$tmp/val.h5" --set train.eval_at_start=true --set train.eval_every=0 --run-dir "$tmp/a" 2>&1) \
  || { echo "$out"; fail "train exited"; }
echo "$out" | grep -E "^train:|^eval|detect:"
python3 - "$out" <<'PY' || fail "the detector did not learn or evaluate"
import re, sys
out = sys.argv[1]
m = re.search(r"train: 12 steps, loss ([0-9.]+) -> ([0-9.]+)", out)
assert m, "no summary"
losses = [float(x) for x in re.findall(r"step +\d+/12 +loss ([0-9.]+)", out)]
assert len(losses) >= 3 and losses[-1] < losses[0], losses
for when in ("before", "after"):
    e = re.search(rf"eval {when}: map50 ([0-9.]+)  map50_95 ([0-9.]+)", out)
    assert e, f"no eval {when}"
    assert 0 <= float(e.group(2)) <= float(e.group(1)) <= 100, e.groups()
PY
final=$(echo "$out" | sed -n 's/^eval after: map50 \([0-9.]*\)  map50_95 \([0-9.]*\)  images [0-9.]*  detections \([0-9]*\).*/\1 \2 \3/p')
ev=$(run eval --task detect --checkpoint "$tmp/a/checkpoints/step_00000012.h5" --data "$tmp/val.h5" --log-level warn 2>&1) \
  || { echo "$ev"; fail "meridian eval exited"; }
echo "$ev" | grep -q "48 images" || { echo "$ev"; fail "eval did not score the 48 validation images"; }
got="$(echo "$ev" | sed -n 's/^eval: map50 \([0-9.]*\)  map50_95 \([0-9.]*\)  .*$/\1 \2/p') $(echo "$ev" | sed -n 's/.* \([0-9]*\) detections$/\1/p')"
[[ -n $final && $got == "$final" ]] || { echo "$ev"; fail "meridian eval gives '$got', the trainer's final evaluation '$final'"; }
run eval --task siglip --checkpoint "$tmp/a/checkpoints/step_00000012.h5" --data "$tmp/val.h5" >"$tmp/e" 2>&1 \
  && fail "eval --task siglip accepted a detect checkpoint"
grep -q "is a model of task detect, not siglip" "$tmp/e" || { cat "$tmp/e"; fail "no clear message for the wrong --task"; }

# 2. Exact resume with SGD + EMA.
sgd=(--set optim.name=sgd --set optim.lr=0.01 --set train.ema=0.9 --set model.sync_bn=true)
train "${sgd[@]}" --run-dir "$tmp/straight" >"$tmp/s.log" 2>&1 || { cat "$tmp/s.log"; fail "straight SGD run"; }
train "${sgd[@]}" --run-dir "$tmp/split" --set train.stop_at=6 >"$tmp/s1.log" 2>&1 || { cat "$tmp/s1.log"; fail "run to 6"; }
train "${sgd[@]}" --run-dir "$tmp/split" --resume auto >"$tmp/s2.log" 2>&1 || { cat "$tmp/s2.log"; fail "resumed run"; }
grep -q "resumed from .*step_00000006.h5" "$tmp/s2.log" || { cat "$tmp/s2.log"; fail "did not resume at step 6"; }
for group in /model /ema /optim; do
  h5diff -r "$tmp/straight/checkpoints/step_00000012.h5" "$tmp/split/checkpoints/step_00000012.h5" $group $group >"$tmp/diff" \
    || { head "$tmp/diff"; fail "$group differs between straight and resumed"; }
done

# 3. A YOLO-txt dataset on disk: prep detection, train, predict.
mkdir -p "$tmp/yolo/images/sub" "$tmp/yolo/labels/sub"
python3 - "$tmp/yolo" <<'PY' || fail "could not write the YOLO dataset"
import random, struct, sys
root = sys.argv[1]
def bmp(path, w, h, pixels):  # 24-bit BMP, rows bottom-up, BGR
    row = (w * 3 + 3) & ~3
    data = bytearray()
    for y in range(h - 1, -1, -1):
        line = bytearray()
        for x in range(w):
            r, g, b = pixels(x, y)
            line += bytes((b, g, r))
        data += line + bytes(row - len(line))
    head = struct.pack("<2sIHHI", b"BM", 54 + len(data), 0, 0, 54)
    info = struct.pack("<IiiHHIIiiII", 40, w, h, 1, 24, 0, len(data), 2835, 2835, 0, 0)
    open(path, "wb").write(head + info + data)
rng = random.Random(3)
for i in range(12):
    w, h = 96, 72
    boxes = []
    for _ in range(rng.randint(1, 3)):
        c = rng.randint(0, 1)
        bw, bh = rng.randint(12, 28), rng.randint(12, 24)
        x0, y0 = rng.randint(0, w - bw), rng.randint(0, h - bh)
        boxes.append((c, x0, y0, bw, bh))
    def px(x, y):
        for c, x0, y0, bw, bh in boxes:
            if x0 <= x < x0 + bw and y0 <= y < y0 + bh:
                return (220, 40, 40) if c == 0 else (40, 60, 220)
        return (90, 140, 90)
    sub = "sub/" if i % 2 else ""
    bmp(f"{root}/images/{sub}img{i}.bmp", w, h, px)
    with open(f"{root}/labels/{sub}img{i}.txt", "w") as f:
        for c, x0, y0, bw, bh in boxes:
            f.write(f"{c} {(x0 + bw / 2) / w:.6f} {(y0 + bh / 2) / h:.6f} {bw / w:.6f} {bh / h:.6f}\n")
open(f"{root}/names.txt", "w").write("red_thing\nblue_thing\n")
PY
run prep detection --images "$tmp/yolo/images" --labels "$tmp/yolo/labels" --class-names "$tmp/yolo/names.txt" --size 64 \
  --out "$tmp/yolo.h5" --log-level warn >"$tmp/p.log" 2>&1 || { cat "$tmp/p.log"; fail "prep detection exited"; }
grep -q "12 of 12" "$tmp/p.log" || { cat "$tmp/p.log"; fail "prep detection did not take the 12 images"; }
train --data "$tmp/yolo.h5" --set train.steps=8 --set train.batch=4 --set checkpoint.every_steps=0 --run-dir "$tmp/y" \
  >"$tmp/y.log" 2>&1 || { cat "$tmp/y.log"; fail "training on the YOLO-txt dataset"; }
run predict --checkpoint "$tmp/y/checkpoints/step_00000008.h5" --images "$tmp/yolo/images" --out "$tmp/pred" --conf 0.0002 --max-det 20 \
  --log-level warn >"$tmp/pr.log" 2>&1 || { cat "$tmp/pr.log"; fail "predict exited"; }
grep -q "predict: 12 images" "$tmp/pr.log" || { cat "$tmp/pr.log"; fail "predict did not process 12 images"; }
for i in 0 1 2 3 4 5 6 7 8 9 10 11; do
  sub=""; (( i % 2 )) && sub="sub/"
  [[ -s $tmp/pred/${sub}img$i.jpg ]] || fail "no drawn image for ${sub}img$i"
  [[ -f $tmp/pred/labels/${sub}img$i.txt ]] || fail "no label file for ${sub}img$i"
done
awk 'NF != 6 || $1 !~ /^[01]$/ || $2 < 0 || $2 > 1 || $3 < 0 || $3 > 1 || $4 <= 0 || $4 > 1 || $5 <= 0 || $5 > 1 || $6 < 0.0002 || $6 > 1 \
  { print FILENAME ": " $0; bad = 1 } END { exit bad }' "$tmp"/pred/labels/*.txt "$tmp"/pred/labels/sub/*.txt \
  || fail "malformed YOLO prediction lines"
cat "$tmp"/pred/labels/*.txt "$tmp"/pred/labels/sub/*.txt | grep -q . || fail "no predictions at all at confidence 0.0002"
# Outputs inside the image directory are not read back as images; two images that would write the
# same outputs are an error naming both.
for round in 1 2; do
  run predict --checkpoint "$tmp/y/checkpoints/step_00000008.h5" --images "$tmp/yolo/images" --out "$tmp/yolo/images/pred" \
    --log-level warn >"$tmp/pr$round.log" 2>&1 || { cat "$tmp/pr$round.log"; fail "predict into the image directory exited"; }
  grep -q "predict: 12 images" "$tmp/pr$round.log" || { cat "$tmp/pr$round.log"; fail "round $round: not 12 images"; }
done
cp "$tmp/yolo/images/img0.bmp" "$tmp/yolo/images/img0.png"
run predict --checkpoint "$tmp/y/checkpoints/step_00000008.h5" --images "$tmp/yolo/images" --out "$tmp/p3" >"$tmp/pc" 2>&1
[[ $? == 2 ]] && grep -q "img0.bmp and .*img0.png would both write img0.jpg" "$tmp/pc" || { cat "$tmp/pc"; fail "no clear error for colliding outputs"; }
mkdir -p "$tmp/empty"
run predict --checkpoint "$tmp/y/checkpoints/step_00000008.h5" --images "$tmp/empty" --out "$tmp/p2" >"$tmp/pe" 2>&1
[[ $? == 2 ]] || { cat "$tmp/pe"; fail "predict on an empty directory did not exit 2"; }
grep -q "no images" "$tmp/pe" || { cat "$tmp/pe"; fail "no clear message for an empty image directory"; }
echo PASS
