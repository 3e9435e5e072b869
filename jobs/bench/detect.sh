#!/usr/bin/env bash
# The detection figures of docs/performance.md, measured in one run on 2 ranks:
#  1. jobs/configs/detect-synthetic.yaml (YOLO12n) on `prep synthetic --kind detection --count 2000
#     --size 128`, evaluated on 200 held-out scenes (--seed 7) every 600 steps, then `meridian eval`
#     on the final checkpoint (AP by size, AP75) and the per-class AP;
#  2. COCO-style real files: tests/detect/coco_reference.py's 12 non-square images with a COCO
#     instances file (ids from 101, categories 3 and 9) through prep --coco, yolo11n trained 150
#     steps from random weights (optim.name auto, the detect default, with lr 0.01 and no EMA as the
#     test does), evaluated with eval --save-json and scored again by pycocotools' COCOeval;
#  3. `meridian model` of every shipped YAML at n (parameters, GFLOPs at 640).
# Usage: jobs/bench/detect.sh [build dir (default build)]. Environment: BENCH_DIR (default
# /tmp/meridian-bench-detect), PARTS (default "1 2 3").
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/jobs/python-env.sh"
bin=${1:-$root/build}/meridian
[[ -x $bin ]] || { echo "detect.sh: $bin not found; build first" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dir=${BENCH_DIR:-/tmp/meridian-bench-detect}
parts=${PARTS:-1 2 3}
mkdir -p "$dir"
mpi=(mpirun --oversubscribe -np 2)
want() { [[ " $parts " == *" $1 "* ]]; }

if want 1; then
  [[ -f $dir/det-train.h5 ]] || "${mpi[@]}" "$bin" prep synthetic --kind detection --count 2000 --size 128 \
    --out "$dir/det-train.h5" --log-level warn >/dev/null
  [[ -f $dir/det-val.h5 ]] || "${mpi[@]}" "$bin" prep synthetic --kind detection --count 200 --size 128 --seed 7 \
    --out "$dir/det-val.h5" --log-level warn >/dev/null
  rm -rf "$dir/synthetic"
  start=$(date +%s)
  "${mpi[@]}" "$bin" train --config "$root/jobs/configs/detect-synthetic.yaml" --data "$dir/det-train.h5" \
    --set data.eval="$dir/det-val.h5" --run-dir "$dir/synthetic" 2>&1 | grep -E "detect:|step +(50|900|1800)/|eval |^train:"
  echo "synthetic: wall $(($(date +%s) - start)) s"
  "${mpi[@]}" "$bin" eval --checkpoint "$dir/synthetic/checkpoints/step_00001800.h5" --data "$dir/det-val.h5" \
    --log-level warn
fi

if want 2; then
  ref=(python3 "$root/tests/detect/coco_reference.py")
  rm -rf "$dir/coco" && mkdir -p "$dir/coco"
  "${ref[@]}" images "$dir/coco/images" "$dir/coco/instances.json"
  "${mpi[@]}" "$bin" prep detection --images "$dir/coco/images" --coco "$dir/coco/instances.json" --size 64 \
    --out "$dir/coco/coco.h5" --log-level warn >/dev/null
  printf 'task: {name: detect}\nmodel: {yaml: yolo11n.yaml}\n' >"$dir/coco/detect.yaml"
  "${mpi[@]}" "$bin" train --config "$dir/coco/detect.yaml" --data "$dir/coco/coco.h5" --run-dir "$dir/coco/run" \
    --set data.augment=false --set train.batch=6 --set train.accumulate=1 --set train.steps=150 \
    --set optim.lr=0.01 --set optim.warmup=20 --set train.ema=0 --set train.log_every=50 --set train.health_every=0 \
    --set checkpoint.every_steps=150 2>&1 | grep -E "optim.name auto|step +(50|100|150)/|^train:"
  "${mpi[@]}" "$bin" eval --checkpoint "$dir/coco/run/checkpoints/step_00000150.h5" --data "$dir/coco/coco.h5" \
    --save-json "$dir/coco/results.json" --log-level warn
  echo "pycocotools' COCOeval on the results JSON: $("${ref[@]}" score "$dir/coco/instances.json" "$dir/coco/results.json" 2>/dev/null)"
fi

if want 3; then
  for y in yolov8n yolo11n yolo12n; do
    printf 'task: {name: detect}\nmodel: {yaml: %s.yaml}\n' "$y" >"$dir/$y.yaml"
    echo "$y: $("$bin" model --config "$dir/$y.yaml" | tail -1)"
  done
fi
