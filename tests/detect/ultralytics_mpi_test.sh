#!/usr/bin/env bash
# Usage: ultralytics_mpi_test.sh MPIRUN MERIDIAN SOURCE_DIR — Ultralytics YOLO weights in and out, on
# 2 ranks, against tests/models/ultralytics_yolo.py (Ultralytics' modules and parse_model written
# with torch.nn, not from meridian's code):
#  1. `train --init FILE.safetensors`: a random COCO-shaped yolo11n (80 classes, Ultralytics'
#     state_dict names) fine-tuned on a 5-class dataset: the class head's tensors of another shape
#     start from initialisation with a notice naming them, the rest are the file's (a few steps of
#     lr 1e-6 later the first convolution is still the file's to 1e-4);
#  2. `export` writes model.safetensors + the model YAML: the reference builds the model from that
#     YAML alone (5 classes, the one scale) and loads the weights strictly, and every tensor is the
#     checkpoint's EMA; --init from the export loads without a notice;
#  3. bad weight files exit 2 on every rank naming the file and the tensor (missing, unknown,
#     misshapen: another family's weights), as do a missing file and a directory; export refuses an
#     existing directory;
#  4. COCO-comparable evaluation: a COCO instances file of non-square images (ids from 101,
#     categories 3 and 9) through prep --coco, 150 steps of training on it, `eval --save-json`:
#     every result names a COCO image and category, its box lies in the original image, and
#     tests/detect/cocoeval_reference.py (COCOeval with numpy) scoring the results file against the
#     original annotations gives meridian's mAP (to 0.002: boxes round-trip through the letterbox and
#     the file's 3 decimals).
#  5. Ultralytics weights before any training, as `yolo val` and `yolo predict` take them: that run
#     exported, `eval --model model.safetensors` (its YAML found beside it) equals the checkpoint's
#     eval and `train --init`'s step-0 evaluation; `predict --model` on the directory and on one image
#     file writes the checkpoint's labels; weights without a YAML and --classes exit 2.
set -u
mpirun=$1 meridian=$2 src=$3
ref=(python3 "$src/tests/models/ultralytics_yolo.py")
# shellcheck source=tests/mpi_script_lib.sh
source "$src/tests/mpi_script_lib.sh"
run() { "$mpirun" --oversubscribe -np 2 "$meridian" "$@"; }

"${ref[@]}" make "$tmp/coco" --yaml "$src/jobs/configs/ultralytics/yolo11.yaml" --scale n --nc 80 --seed 5 --size 32 ||
  fail "the reference could not make a model"
run prep synthetic --kind detection --count 32 --size 64 --out "$tmp/det.h5" --log-level warn >/dev/null || fail "prep"
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
python3 - "$ck" "$tmp/coco/model.safetensors" "$src/tests/models" <<'PY' || fail "the run did not start from the file's weights"
import sys, h5py, torch
sys.path.insert(0, sys.argv[3])
from hf_siglip import read_safetensors
w = read_safetensors(sys.argv[2])
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
"${ref[@]}" same "$tmp/exp" "$ck" || fail "the reference does not load the export as the checkpoint's weights"
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
python3 - "$tmp/coco/model.safetensors" "$tmp" "$src/tests/models" <<'PY' || fail "could not write the bad files"
import sys, torch
sys.path.insert(0, sys.argv[3])
from hf_siglip import read_safetensors, write_safetensors
w = list(read_safetensors(sys.argv[1]).items())
write_safetensors(f"{sys.argv[2]}/missing.safetensors", [(k, v) for k, v in w if k != "model.16.cv2.bn.running_var"])
write_safetensors(f"{sys.argv[2]}/extra.safetensors", w + [("model.24.extra.weight", torch.zeros(2))])
PY
"${ref[@]}" make "$tmp/v8" --yaml "$src/jobs/configs/ultralytics/yolov8.yaml" --scale n --nc 80 --size 32 || fail "yolov8n"
init() { run train --config "$tmp/small.yaml" --data "$tmp/det.h5" --set train.steps=1 --run-dir "$tmp/bad" --init "$@"; }
expect_error "a missing tensor" "missing.safetensors.*model.16.cv2.bn.running_var" init "$tmp/missing.safetensors"
expect_error "an unknown tensor" "extra.safetensors.*model.24.extra.weight" init "$tmp/extra.safetensors"
expect_error "another family's weights" "v8/model.safetensors: load_into: missing from the file" \
  init "$tmp/v8/model.safetensors"
expect_error "a missing file" "task.init.*does not exist" init "$tmp/none.safetensors"
expect_error "a directory" "task.init.*is a directory; task detect starts from one .safetensors file" init "$tmp/coco"

# 4. COCO results JSON in the original images' pixels.
coco_ref=(python3 "$src/tests/detect/cocoeval_reference.py")
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
"${coco_ref[@]}" score "$tmp/cimg.json" "$tmp/results.json" >"$tmp/ref.json" || fail "the reference could not score the results"
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
print(f"{len(res)} results; meridian map50 {m['map50']:.3f} map50_95 {m['map50_95']:.3f}; "
      f"reference on the JSON map50 {100 * ref['map50']:.3f} map50_95 {100 * ref['map50_95']:.3f}")
assert m["map50"] > 1, "the model found nothing: the comparison would say little"
for k in ("map50", "map50_95", "map75"):
    assert abs(m[k] - 100 * max(ref[k], 0)) < 0.2, k
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
echo "PASS"
