#!/usr/bin/env bash
# Detection against its speed peer, Ultralytics' own trainer, on the same data and machine, in one run:
#  - the data: meridian's synthetic aerial scenes (`prep synthetic --kind detection`, N training and 200
#    validation scenes at SIZE px) written out as an Ultralytics dataset (PNG images, labels/*.txt,
#    data.yaml), which both tools read: Ultralytics from the files, meridian through
#    `prep detection --data-yaml` (the same pixels and boxes);
#  - Ultralytics as its users run it: `yolo detect train model=yolo12n.yaml data=data.yaml imgsz=SIZE
#    epochs=E batch=16 device=cpu` with its default recipe (optimizer=auto, mosaic, close_mosaic, EMA,
#    validation after every epoch), plots off (they fetch a font), offline;
#  - meridian with jobs/configs/yolo-coco.yaml (Ultralytics' recipe: optim.name auto, the same
#    augmentation, validation every epoch), model.yaml yolo12n.yaml, image_size SIZE, E epochs, float32
#    as Ultralytics trains on a CPU, 1 rank (batch 16, 2 threads) and 2 ranks (batch 8 each, 1 thread);
#  - runs alternate (Ultralytics, meridian 1 rank, meridian 2 ranks) REPEATS times; each reports images/s
#    over the whole run (N * E images over the command's wall time, its validations included: both
#    validate every epoch) and the final validation's mAP50-95 by its own evaluator, and Ultralytics'
#    final weights are scored again by `meridian eval` (one evaluator for both).
# Usage: jobs/bench/detect-vs-ultralytics.sh [build dir (default build)]
# Environment: BENCH_DIR (default /tmp/meridian-bench-ultralytics), N (1000), SIZE (128), EPOCHS (10),
# REPEATS (1), MODEL (yolo12n).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/jobs/python-env.sh"
bin=$(cd "${1:-$root/build}" && pwd)/meridian
[[ -x $bin ]] || { echo "detect-vs-ultralytics.sh: $bin not found; build first" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dir=${BENCH_DIR:-/tmp/meridian-bench-ultralytics}
n=${N:-1000} size=${SIZE:-128} epochs=${EPOCHS:-10} repeats=${REPEATS:-1} model=${MODEL:-yolo12n}
# Ultralytics offline, its settings and runs under $dir rather than ~/.config and ./runs.
export YOLO_OFFLINE=1 YOLO_CONFIG_DIR=$dir/ultralytics-config MPLCONFIGDIR=$dir/matplotlib
mkdir -p "$dir"

# 1. The data, once: synthetic scenes -> an Ultralytics dataset -> meridian's datasets from its data.yaml.
if [[ ! -f $dir/val.h5 ]]; then
  mpirun --oversubscribe -np 2 "$bin" prep synthetic --kind detection --count "$n" --size "$size" --seed 1 \
    --out "$dir/syn-train.h5" --log-level warn
  mpirun --oversubscribe -np 2 "$bin" prep synthetic --kind detection --count 200 --size "$size" --seed 7 \
    --out "$dir/syn-val.h5" --log-level warn
  python3 - "$dir" <<'PY'
import os, sys, h5py, numpy as np
from PIL import Image
d = sys.argv[1]
for split in ("train", "val"):
    with h5py.File(f"{d}/syn-{split}.h5", "r") as f:
        images, boxes, classes, offsets = (f[k][...] for k in ("images", "boxes", "box_classes", "box_offsets"))
        names = [n.decode() if isinstance(n, bytes) else n for n in f["class_names"][...]]
    os.makedirs(f"{d}/yolo/images/{split}", exist_ok=True)
    os.makedirs(f"{d}/yolo/labels/{split}", exist_ok=True)
    for i, img in enumerate(images):
        h, w = img.shape[:2]
        Image.fromarray(img).save(f"{d}/yolo/images/{split}/{i:05d}.png")
        with open(f"{d}/yolo/labels/{split}/{i:05d}.txt", "w") as out:
            for (x0, y0, x1, y1), c in zip(boxes[offsets[i]:offsets[i + 1]], classes[offsets[i]:offsets[i + 1]]):
                out.write(f"{c} {(x0 + x1) / 2 / w:.6f} {(y0 + y1) / 2 / h:.6f} {(x1 - x0) / w:.6f} {(y1 - y0) / h:.6f}\n")
with open(f"{d}/yolo/data.yaml", "w") as out:
    out.write(f"path: {d}/yolo\ntrain: images/train\nval: images/val\nnames:\n")
    out.writelines(f"  {k}: {name}\n" for k, name in enumerate(names))
print(f"{d}/yolo: an Ultralytics dataset, {len(names)} classes: {', '.join(names)}")
PY
  for split in train val; do
    mpirun --oversubscribe -np 2 "$bin" prep detection --data-yaml "$dir/yolo/data.yaml" --split "$split" \
      --size "$size" --out "$dir/$split.h5" --log-level warn
  done
fi

wall() { local s=$SECONDS; "$@" >"$log" 2>&1 || { tail -30 "$log"; echo "FAILED: $*" >&2; exit 1; }; echo $((SECONDS - s)); }
rate() { python3 -c "print(f'{$n * $epochs / $1:.1f}')"; }
results=()
for r in $(seq 1 "$repeats"); do
  # Ultralytics' trainer.
  rm -rf "$dir/ul"
  log=$dir/ultralytics-$r.log
  t=$(cd "$dir" && wall yolo detect train model="$model.yaml" data="$dir/yolo/data.yaml" imgsz="$size" epochs="$epochs" \
    batch=16 device=cpu workers=2 plots=False pretrained=False amp=False project="$dir/ul" name=run exist_ok=True seed=0)
  ul_map=$(python3 -c "import csv,sys; r=list(csv.DictReader(open(sys.argv[1]))); print(float(r[-1]['metrics/mAP50-95(B)'].strip()))" \
    "$dir/ul/run/results.csv")
  # Its final weights (the EMA, as its best.pt/last.pt hold them) scored by meridian eval too.
  python3 - "$dir/ul/run/weights/last.pt" "$dir/ul-export" "$model" <<'PY'
import os, sys, torch, yaml
from safetensors.torch import save_file
ck = torch.load(sys.argv[1], map_location="cpu", weights_only=False)
m = (ck.get("ema") or ck["model"]).float()
os.makedirs(sys.argv[2], exist_ok=True)
save_file({k: v.contiguous() for k, v in m.state_dict().items()}, f"{sys.argv[2]}/model.safetensors")
yaml.safe_dump(dict(m.yaml), open(f"{sys.argv[2]}/model.yaml", "w"))
PY
  ul_meridian_map=$("$bin" eval --model "$dir/ul-export/model.safetensors" --data "$dir/val.h5" --log-level warn \
    --json "$dir/ul-eval.json" >/dev/null && python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['metrics']['map50_95'])" "$dir/ul-eval.json")
  results+=("ultralytics $t s $(rate "$t") images/s mAP50-95 $ul_map (meridian eval of its weights: $ul_meridian_map)")
  # meridian, 1 rank and 2 ranks, global batch 16.
  for np in 1 2; do
    rm -rf "$dir/m$np"
    log=$dir/meridian-np$np-$r.log
    t=$(wall mpirun --oversubscribe -np "$np" "$bin" train --config "$root/jobs/configs/yolo-coco.yaml" --data "$dir/train.h5" \
      --set data.eval="$dir/val.h5" --set model.yaml="$model.yaml" --set data.image_size="$size" \
      --set train.epochs="$epochs" --set train.batch=$((16 / np)) --set train.precision=float32 --threads $((2 / np)) \
      --set checkpoint.every_minutes=0 --set train.log_every=100 --run-dir "$dir/m$np")
    m_map=$(python3 -c "
import csv,sys
rows=[r for r in csv.DictReader(open(sys.argv[1])) if r['name']=='eval/map50_95']
print(float(rows[-1]['value']))" "$dir/m$np/metrics.csv")
    results+=("meridian ${np}r $t s $(rate "$t") images/s mAP50-95 $m_map")
  done
done
echo "detect-vs-ultralytics: $model, $n images of ${size} px, $epochs epochs, batch 16 in all, float32, $(nproc) cores;" \
  "ultralytics $(python3 -c 'import ultralytics; print(ultralytics.__version__)'), torch $(python3 -c 'import torch; print(torch.__version__)')"
printf '  %s\n' "${results[@]}"
