#!/usr/bin/env bash
# Usage: ultralytics_mpi_test.sh MPIRUN MERIDIAN SOURCE_DIR — Ultralytics YOLO weights in and out, on
# 2 ranks, against the real ultralytics package through tests/models/ultralytics_yolo.py (two Python
# processes import it: `make` at the start, `check` at the end):
#  1. `train --init FILE.safetensors`: a random COCO-shaped yolo11n (80 classes, made by Ultralytics'
#     DetectionModel) fine-tuned on a 5-class dataset: the class head's tensors of another shape
#     start from initialisation with a notice naming them, the rest are the file's (a few steps of
#     lr 1e-6 later the first convolution is still the file's to 1e-4);
#  2. `export` writes model.safetensors + the model YAML: Ultralytics' DetectionModel built from that
#     YAML alone (5 classes, the one scale) loads the weights with load_state_dict(strict=True), and
#     every tensor is the checkpoint's EMA (checked at the end); --init from the export loads without
#     a notice;
#  3. bad weight files exit 2 on every rank naming the file and the tensor (missing, unknown,
#     misshapen: another family's weights, Ultralytics' yolov8n), as do a missing file and a directory;
#     export refuses an existing directory;
#  4. COCO-comparable evaluation: a COCO instances file of non-square images (ids from 101,
#     categories 3 and 9) through prep --coco, 150 steps of training on it, `eval --save-json`:
#     every result names a COCO image and category, its box lies in the original image, and
#     pycocotools' COCOeval (tests/detect/coco_reference.py score) of the results file against the
#     original annotations gives meridian's mAP50-95, mAP50, AP75 and AP small / medium / large to
#     0.01 points (the largest difference printed).
#  5. Ultralytics weights before any training, as `yolo val` and `yolo predict` take them: that run
#     exported, `eval --model model.safetensors` (its YAML found beside it) equals the checkpoint's
#     eval and `train --init`'s step-0 evaluation; `predict --model` on the directory and on one image
#     file writes the checkpoint's labels; weights without a YAML and --classes exit 2. Against
#     Ultralytics, on the COCO images letterboxed to 64 px as an Ultralytics dataset (images/,
#     labels/*.txt, data.yaml; prep --data-yaml for meridian): `predict --model` writes the boxes,
#     classes and scores of Ultralytics' DetectionModel with the exported weights through its
#     non_max_suppression (same conf, iou, max_det) to 1e-3 of the image size; Ultralytics'
#     DetectionValidator (plots=False) on the dataset and `eval --model` agree on mAP50-95 and mAP50
#     within 0.01 points, its matches scored by pycocotools' 101-point rule as meridian's (its own
#     trapezoid-rule figures, up to ~0.5 points off by construction, printed beside).
set -u
mpirun=$1 meridian=$2 src=$3
ref=(python3 "$src/tests/models/ultralytics_yolo.py")
# shellcheck source=tests/mpi_script_lib.sh
source "$src/tests/mpi_script_lib.sh"
run() { "$mpirun" --oversubscribe -np 2 "$meridian" "$@"; }

# Ultralytics' yolo11n (meridian's YAML, scale n) with COCO's 80 classes, and its yolov8n for section 3.
"${ref[@]}" make "$tmp/coco" --yaml "$src/jobs/configs/ultralytics/yolo11.yaml" --scale n --nc 80 --seed 5 --size 32 \
  --case "$tmp/v8:yolov8n.yaml::80:0:32" || fail "Ultralytics could not make the models"
synthetic det.h5
cat >"$tmp/small.yaml" <<'EOF'
task: {name: detect}
model: {yaml: yolo11n.yaml}
data: {close_mosaic: 0}
train: {batch: 4, steps: 3, log_every: 1, health_every: 0, ema: 0.9, ema_tau: 1}
optim: {lr: 1.0e-6, warmup: 1}
checkpoint: {every_steps: 3}
EOF

# 1. From the COCO-shaped weights onto 5 classes.
out=$(run train --config "$tmp/small.yaml" --data "$tmp/det.h5" --init "$tmp/coco/model.safetensors" \
  --run-dir "$tmp/ft" 2>&1) || { echo "$out"; fail "train --init exited"; }
echo "$out" | grep -E "task.init" | head -2
echo "$out" | grep -q "class head is for other classes than this model's 5: .* tensors of it start from initialisation (model.23.cv3" ||
  { echo "$out"; fail "no notice that the class head starts from initialisation"; }
ck=$tmp/ft/checkpoints/step_00000003.h5
[[ -f $ck ]] || fail "no checkpoint after train --init"
python3 - "$ck" "$tmp/coco/model.safetensors" <<'PY' || fail "the run did not start from the file's weights"
import sys, h5py, torch
from safetensors.torch import load_file
w = load_file(sys.argv[2])
with h5py.File(sys.argv[1], "r") as f:
    for name in ("model.0.conv.weight", "model.10.m.0.attn.qkv.conv.weight", "model.23.cv2.1.2.weight"):
        got = torch.from_numpy(f["model"][name][...])
        diff = (got - w[name]).abs().max().item()
        print(f"{name}: max |trained - file| {diff:.2e} (file values up to {w[name].abs().max().item():.2f})")
        assert diff < 1e-4, name
PY

# 2. Out to Ultralytics and back in.
run export --checkpoint "$ck" --out "$tmp/exp" --log-level warn || fail "export exited $?"
[[ -f $tmp/exp/model.safetensors && -f $tmp/exp/yolo11.yaml ]] || fail "export wrote $(ls "$tmp/exp")"
grep -q "^nc: 5" "$tmp/exp/yolo11.yaml" || { cat "$tmp/exp/yolo11.yaml"; fail "the exported YAML does not say nc: 5"; }
out=$(run train --config "$tmp/small.yaml" --data "$tmp/det.h5" --init "$tmp/exp/model.safetensors" \
  --set train.steps=1 --run-dir "$tmp/back" 2>&1) || { echo "$out"; fail "train --init from the export exited"; }
echo "$out" | grep -q "class head is for other classes" && { echo "$out"; fail "the export's own classes were re-initialised"; }
expect_error "export over an existing directory" "exists" "$meridian" export --checkpoint "$ck" --out "$tmp/exp"
# A model YAML of one's own travels in the checkpoint (model.yaml_text): eval works after it is gone.
mkdir -p "$tmp/my" && cp "$src/jobs/configs/ultralytics/yolov8.yaml" "$tmp/my/mine.yaml"
out=$(run train --config "$tmp/small.yaml" --data "$tmp/det.h5" --set model.yaml="$tmp/my/mine.yaml" --set train.steps=1 \
  --set checkpoint.every_steps=1 --run-dir "$tmp/mine" 2>&1) || { echo "$out"; fail "train with a YAML file"; }
rm -r "$tmp/my"
run eval --checkpoint "$tmp/mine/checkpoints/step_00000001.h5" --data "$tmp/det.h5" --log-level warn >"$tmp/mine.log" 2>&1 ||
  { cat "$tmp/mine.log"; fail "eval needed the model YAML file"; }

# 3. Bad weight files.
python3 - "$tmp/coco/model.safetensors" "$tmp" <<'PY' || fail "could not write the bad files"
import sys, torch
from safetensors.torch import load_file, save_file
w = load_file(sys.argv[1])
save_file({k: v for k, v in w.items() if k != "model.16.cv2.bn.running_var"}, f"{sys.argv[2]}/missing.safetensors")
save_file({**w, "model.24.extra.weight": torch.zeros(2)}, f"{sys.argv[2]}/extra.safetensors")
PY
init() { run train --config "$tmp/small.yaml" --data "$tmp/det.h5" --set train.steps=1 --run-dir "$tmp/bad" --init "$@"; }
expect_error "a missing tensor" "missing.safetensors.*model.16.cv2.bn.running_var" init "$tmp/missing.safetensors"
expect_error "an unknown tensor" "extra.safetensors.*model.24.extra.weight" init "$tmp/extra.safetensors"
expect_error "another family's weights" "v8/model.safetensors: load_into: missing from the file" \
  init "$tmp/v8/model.safetensors"
expect_error "a missing file" "task.init.*does not exist" init "$tmp/none.safetensors"
expect_error "a directory" "task.init.*is a directory; task detect starts from one .safetensors file" init "$tmp/coco"

# 4. COCO results JSON in the original images' pixels.
coco_ref=(python3 "$src/tests/detect/coco_reference.py")
"${coco_ref[@]}" images "$tmp/cimg" "$tmp/cimg.json" || fail "the reference could not write the COCO images"
run prep detection --images "$tmp/cimg" --coco "$tmp/cimg.json" --size 64 --out "$tmp/coco.h5" --log-level warn \
  >/dev/null || fail "prep --coco"
out=$(run train --config "$tmp/small.yaml" --data "$tmp/coco.h5" --set train.steps=150 --set optim.lr=0.01 \
  --set optim.warmup=20 --set train.ema=0 --set data.augment=false --set train.batch=6 --set train.accumulate=1 \
  --set checkpoint.every_steps=150 \
  --run-dir "$tmp/c" 2>&1) || { echo "$out"; fail "train on the COCO file"; }
ev=$(run eval --checkpoint "$tmp/c/checkpoints/step_00000150.h5" --data "$tmp/coco.h5" --save-json "$tmp/results.json" \
  --json "$tmp/metrics.json" --log-level warn 2>&1) || { echo "$ev"; fail "eval --save-json exited"; }
echo "$ev" | grep "^eval:"
"${coco_ref[@]}" score "$tmp/cimg.json" "$tmp/results.json" >"$tmp/ref.json" 2>"$tmp/ref.log" ||
  { cat "$tmp/ref.log"; fail "pycocotools could not score the results"; }
python3 - "$tmp/cimg.json" "$tmp/results.json" "$tmp/metrics.json" "$tmp/ref.json" <<'PY' || fail "the results JSON"
import json, sys
ann, res, ours, ref = (json.load(open(p)) for p in sys.argv[1:5])
sizes = {im["id"]: (im["width"], im["height"]) for im in ann["images"]}
assert res, "no detections written"
for r in res:
    assert r["image_id"] in sizes and r["category_id"] in (3, 9), r
    w, h = sizes[r["image_id"]]
    x, y, bw, bh = r["bbox"]
    assert -1e-3 <= x and -1e-3 <= y and x + bw <= w + 1e-3 and y + bh <= h + 1e-3, (r, w, h)
m = ours["metrics"]
print(f"{len(res)} results; meridian map50 {m['map50']:.4f} map50_95 {m['map50_95']:.4f}; "
      f"pycocotools on the JSON map50 {100 * ref['map50']:.4f} map50_95 {100 * ref['map50_95']:.4f}")
assert m["map50"] > 1, "the model found nothing: the comparison would say little"
worst = 0.0
for k in ("map50_95", "map50", "map75", "map_small", "map_medium", "map_large"):
    # meridian's points; COCOeval's fraction, -1 where it has none (meridian: 0 for the first three, else -100)
    want = 100 * (max(ref[k], 0) if k in ("map50_95", "map50", "map75") else ref[k])
    worst = max(worst, abs(m[k] - want))
    assert abs(m[k] - want) <= 0.01, (k, m[k], want)
print(f"largest |meridian - pycocotools| over the 6 AP figures: {worst:.2e} points (tolerance 0.01)")
PY

# 5. The trained model as Ultralytics weights, before any training of ours.
run export --checkpoint "$tmp/c/checkpoints/step_00000150.h5" --out "$tmp/cexp" --log-level warn || fail "export exited $?"
ev=$(run eval --model "$tmp/cexp/model.safetensors" --data "$tmp/coco.h5" --json "$tmp/m_pub.json" 2>&1) ||
  { echo "$ev"; fail "eval --model FILE.safetensors exited"; }
grep -q "eval: Ultralytics weights $tmp/cexp/model.safetensors (task detect) with model YAML $tmp/cexp/yolo11.yaml, 2 class names" <<<"$ev" ||
  { echo "$ev"; fail "eval does not say what it loaded"; }
out=$(run train --config "$tmp/small.yaml" --data "$tmp/coco.h5" --init "$tmp/cexp/model.safetensors" \
  --set model.yaml="$tmp/cexp/yolo11.yaml" --set data.eval="$tmp/coco.h5" --set train.eval_at_start=true \
  --set train.steps=1 --set data.augment=false --run-dir "$tmp/c0" 2>&1) || { echo "$out"; fail "train --init the export"; }
python3 - "$tmp/metrics.json" "$tmp/m_pub.json" "$tmp/c0/metrics.csv" <<'PY' || fail "eval --model of the weights"
import csv, json, sys
ck, pub = (json.load(open(p))["metrics"] for p in sys.argv[1:3])
step0 = {r["name"][5:]: float(r["value"]) for r in csv.DictReader(open(sys.argv[3])) if r["step"] == "0" and r["name"].startswith("eval/")}
for k in ("map50", "map50_95"):
    assert abs(pub[k] - ck[k]) <= 1e-9 and abs(pub[k] - step0[k]) <= 1e-6 * max(1, pub[k]), (k, pub[k], ck[k], step0[k])
print(f"eval --model weights = the checkpoint's = train --init at step 0: map50 {pub['map50']:.3f} map50_95 {pub['map50_95']:.3f}")
PY
run predict --checkpoint "$tmp/c/checkpoints/step_00000150.h5" --images "$tmp/cimg" --out "$tmp/pred_ck" --size 64 \
  --log-level warn >/dev/null || fail "predict --checkpoint exited $?"
run predict --model "$tmp/cexp/model.safetensors" --images "$tmp/cimg" --out "$tmp/pred_pub" --size 64 --log-level warn \
  >/dev/null || fail "predict --model exited $?"
# The labels are compared below: they must hold boxes (an empty file per image would compare equal).
boxes_in() { cat "$1"/*.txt 2>/dev/null | grep -c .; }  # boxes_in LABEL_DIR: the boxes predict wrote there
boxes=$(boxes_in "$tmp/pred_ck/labels")
images=$(ls "$tmp/cimg" | grep -c .)
((boxes >= images)) || fail "predict --checkpoint wrote $boxes box(es) for $images images of the training set it fits"
diff -r "$tmp/pred_ck/labels" "$tmp/pred_pub/labels" >/dev/null || fail "predict --model wrote other labels than the checkpoint"
one=$(ls "$tmp/cimg" | head -1)
run predict --model "$tmp/cexp/model.safetensors" --images "$tmp/cimg/$one" --out "$tmp/pred_one" --size 64 \
  --log-level warn >/dev/null || fail "predict on one image file exited $?"
label=labels/${one%.*}.txt
cmp -s "$tmp/pred_ck/$label" "$tmp/pred_one/$label" && [[ $(ls "$tmp/pred_one/labels" | wc -l) == 1 ]] ||
  { diff "$tmp/pred_ck/$label" "$tmp/pred_one/$label"; ls "$tmp/pred_one/labels"; fail "predict on one file"; }
echo "predict --model: the checkpoint's labels for $(ls "$tmp/pred_ck/labels" | wc -l) images, and for $one alone"
mkdir -p "$tmp/bare" && cp "$tmp/cexp/model.safetensors" "$tmp/bare/"
expect_error "weights without their model YAML" "bare/model.safetensors: which model are these weights\\? Give --set model.yaml" \
  "$meridian" eval --model "$tmp/bare/model.safetensors" --data "$tmp/coco.h5"
expect_error "--classes for a detector" "--classes is for zero-shot classification" \
  "$meridian" predict --model "$tmp/cexp/model.safetensors" --images "$tmp/cimg" --out "$tmp/x" --classes "a,b"

# The same model in Ultralytics. The COCO images letterboxed to 64 px (as prep does: scale to the
# longer side, grey 114 borders) as an Ultralytics dataset: square images, so that neither side
# letterboxes them again; labels of the non-crowd boxes, the classes in category-id order as prep's.
python3 - "$tmp/cimg" "$tmp/cimg.json" "$tmp/yds" <<'PY' || fail "could not write the Ultralytics dataset"
import json, os, sys
import cv2, numpy as np
images, ann, out = sys.argv[1:4]
coco = json.load(open(ann))
cats = sorted(c["id"] for c in coco["categories"])
os.makedirs(f"{out}/images/val"), os.makedirs(f"{out}/labels/val")
for im in coco["images"]:
    bgr = cv2.imread(f"{images}/{im['file_name']}")
    h0, w0 = bgr.shape[:2]
    r = 64 / max(w0, h0)
    w, h = max(1, round(w0 * r)), max(1, round(h0 * r))
    px, py = (64 - w) // 2, (64 - h) // 2
    canvas = np.full((64, 64, 3), 114, np.uint8)
    canvas[py:py + h, px:px + w] = cv2.resize(bgr, (w, h), interpolation=cv2.INTER_AREA if r < 1 else cv2.INTER_LINEAR)
    stem = os.path.splitext(im["file_name"])[0]
    cv2.imwrite(f"{out}/images/val/{stem}.png", canvas)
    with open(f"{out}/labels/val/{stem}.txt", "w") as f:
        for a in coco["annotations"]:
            if a["image_id"] != im["id"] or a.get("iscrowd", 0):
                continue
            x, y, bw, bh = a["bbox"]
            x1, y1 = min(max(x * r + px, 0), 64), min(max(y * r + py, 0), 64)
            x2, y2 = min(max((x + bw) * r + px, 0), 64), min(max((y + bh) * r + py, 0), 64)
            f.write(f"{cats.index(a['category_id'])} {(x1 + x2) / 128:.6f} {(y1 + y2) / 128:.6f} "
                    f"{(x2 - x1) / 64:.6f} {(y2 - y1) / 64:.6f}\n")
names = {c["id"]: c["name"] for c in coco["categories"]}
with open(f"{out}/data.yaml", "w") as f:
    f.write(f"path: {out}\ntrain: images/val\nval: images/val\nnames:\n")
    f.writelines(f"  {i}: {names[c]}\n" for i, c in enumerate(cats))
PY
run prep detection --data-yaml "$tmp/yds/data.yaml" --split val --size 64 --out "$tmp/yds.h5" --log-level warn >/dev/null ||
  fail "prep --data-yaml of the Ultralytics dataset"
ev=$(run eval --model "$tmp/cexp/model.safetensors" --data "$tmp/yds.h5" --json "$tmp/m_yds.json" --log-level warn 2>&1) ||
  { echo "$ev"; fail "eval --model on the Ultralytics dataset exited"; }
run predict --model "$tmp/cexp/model.safetensors" --images "$tmp/yds/images/val" --out "$tmp/pred_yds" --size 64 \
  --conf 0.1 --iou 0.7 --max-det 300 --log-level warn >/dev/null || fail "predict on the Ultralytics dataset exited $?"
(($(boxes_in "$tmp/pred_yds/labels") > 0)) || fail "predict wrote no box on the Ultralytics dataset"
"${ref[@]}" check --export "$tmp/exp" --checkpoint "$ck" --weights "$tmp/cexp" --images "$tmp/yds/images/val" \
  --labels "$tmp/pred_yds/labels" --conf 0.1 --iou 0.7 --max-det 300 --data "$tmp/yds/data.yaml" --metrics "$tmp/m_yds.json" ||
  fail "Ultralytics does not load the export as the checkpoint's weights, or predicts or scores otherwise than meridian"
echo "PASS"
