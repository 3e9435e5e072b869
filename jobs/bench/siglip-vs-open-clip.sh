#!/usr/bin/env bash
# SigLIP against its speed peer, open_clip's own training script (open_clip_train.main --siglip, on the
# CPU: one process, as its script cannot run data-parallel there), on UCM-Captions, in one run:
#  - the same images and captions: UCM's train split (1680 images x 5 captions) at SIZE px; meridian reads
#    them from `prep image-text`'s dataset (one row per image, one of its captions drawn per visit),
#    open_clip from a CSV of one row per image and caption (jobs/bench/open_clip_ucm.py files, the images
#    resized once, as users prepare data for it);
#  - the same shape: jobs/configs/ucm-siglip-tiny.yaml's (192 wide, 4 layers, 3 heads, patch 16, context
#    32, embedding 192), in open_clip's own modules (open_clip_ucm.py: its tokenizer, 49,408 tokens);
#    the same recipe: AdamW lr 1e-3, weight decay 0.05, warmup 100, clip 1.0, cosine
#    to the end, float32, global batch 64 on the machine's 2 cores, the same number of samples
#    (EPOCHS of open_clip's 8400 pairs = EPOCHS x 8400 / 64 steps of meridian);
#  - then both on the test split (210 images): zero-shot top-1 and mR by the same definitions
#    (meridian eval; open_clip_ucm.py eval on open_clip's checkpoint).
# Prints samples/s (training steps only: open_clip's mean Batch (t) after its first log window,
# meridian's train/samples_per_s averaged over its log windows after the first), wall seconds, zero-shot and mR of each.
# Usage: jobs/bench/siglip-vs-open-clip.sh [build dir (default build)]
# Environment: BENCH_DIR (default /tmp/meridian-bench-open-clip), EPOCHS (2), SIZE (128).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/jobs/python-env.sh"
bin=$(cd "${1:-$root/build}" && pwd)/meridian
[[ -x $bin ]] || { echo "siglip-vs-open-clip.sh: $bin not found; build first" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
dir=${BENCH_DIR:-/tmp/meridian-bench-open-clip}
epochs=${EPOCHS:-2} size=${SIZE:-128}
ucm=$root/../shared/data/ucm-captions
[[ -f $ucm/captions.jsonl ]] || { echo "siglip-vs-open-clip.sh: no $ucm" >&2; exit 2; }
mkdir -p "$dir"
[[ -f $dir/train.h5 ]] || mpirun --oversubscribe -np 2 "$bin" prep image-text --images "$ucm" \
  --captions "$ucm/captions.jsonl" --split train --size "$size" --context-length 32 --vocab-size 8000 --out "$dir/train.h5" \
  --log-level warn
[[ -f $dir/test.h5 ]] || mpirun --oversubscribe -np 2 "$bin" prep image-text --images "$ucm" \
  --captions "$ucm/captions.jsonl" --split test --size "$size" --tokenizer "$dir/train.h5" --out "$dir/test.h5" --log-level warn
[[ -f $dir/oc/model/open_clip_config.json ]] || python3 "$root/jobs/bench/open_clip_ucm.py" files "$ucm" "$dir/oc" "$size"
pairs=$(($(wc -l <"$dir/oc/train.csv") - 1))
steps=$((epochs * pairs / 64))
prompts=$(python3 -c "import yaml, json; print(json.dumps(yaml.safe_load(open('$root/jobs/configs/ucm-siglip-tiny.yaml'))['task']['prompts']))")

# open_clip: one process with both cores. Its script cannot run data-parallel on CPUs: it wraps the model in
# DistributedDataParallel(device_ids=[device]), which PyTorch refuses for a CPU module (open_clip 3.3.0).
rm -rf "$dir/oc-logs"
start=$SECONDS
OMP_NUM_THREADS=2 python3 -m open_clip_train.main --model "local-dir:$dir/oc/model" \
  --siglip --train-data "$dir/oc/train.csv" --dataset-type csv --csv-img-key filepath --csv-caption-key title \
  --batch-size 64 --epochs "$epochs" --lr 1e-3 --wd 0.05 --warmup 100 --grad-clip-norm 1.0 --precision fp32 \
  --workers 1 --device cpu --seed 0 --log-every-n-steps 20 --save-frequency "$epochs" \
  --report-to "" --logs "$dir/oc-logs" --name run >"$dir/open_clip.log" 2>&1 || { tail -30 "$dir/open_clip.log"; exit 1; }
oc_wall=$((SECONDS - start))
oc_rate=$(grep -oE 'Batch \(t\): [0-9.]+' "$dir/oc-logs/run/out.log" | grep -oE '[0-9.]+$' |
  python3 -c "import sys; t = [float(x) for x in sys.stdin][1:]; print(f'{64 / (sum(t) / len(t)):.1f}')")
oc_eval=$(python3 "$root/jobs/bench/open_clip_ucm.py" eval "$dir/oc" "$dir/oc-logs/run/checkpoints/epoch_$epochs.pt" "$prompts")
results=("open_clip 1 process x 2 threads: $oc_rate samples/s, wall $oc_wall s; test: $oc_eval")

# meridian: 1 rank with both cores (as open_clip), and 2 ranks of one core each; global batch 64.
for np in 1 2; do
  rm -rf "$dir/m$np"
  start=$SECONDS
  mpirun -np "$np" --bind-to none "$bin" train --config "$root/jobs/configs/ucm-siglip-tiny.yaml" --data "$dir/train.h5" \
    --threads $((2 / np)) --set train.batch=$((64 / np)) --set train.steps="$steps" --set train.eval_every=0 \
    --set train.eval_at_start=false --set train.log_every=20 --set checkpoint.every_steps="$steps" --run-dir "$dir/m$np" \
    >"$dir/meridian-np$np.log" 2>&1 || { tail -30 "$dir/meridian-np$np.log"; exit 1; }
  wall=$((SECONDS - start))
  rate=$(python3 - "$dir/m$np/metrics.csv" <<'PY'
import csv, sys
r = [float(r["value"]) for r in csv.DictReader(open(sys.argv[1])) if r["name"] == "train/samples_per_s"][1:]
print(f"{sum(r) / len(r):.1f}")
PY
  )
  ck=$(ls "$dir"/m$np/checkpoints/step_*.h5 | tail -1)
  mpirun --oversubscribe -np 2 "$bin" eval --checkpoint "$ck" --data "$dir/test.h5" --json "$dir/m-eval.json" --log-level warn >/dev/null
  m_eval=$(python3 -c "import json,sys; m=json.load(open(sys.argv[1]))['metrics']; print(json.dumps({k: round(v, 2) for k, v in m.items()}))" "$dir/m-eval.json")
  results+=("meridian $np rank(s) x $((2 / np)) thread(s): $rate samples/s, wall $wall s; test: $m_eval")
done

echo "siglip-vs-open-clip: UCM train split at $size px, $epochs epochs of $pairs pairs = $steps steps of 64, float32," \
  "$(nproc) cores; open_clip $(python3 -c 'import open_clip; print(open_clip.__version__)'), torch $(python3 -c 'import torch; print(torch.__version__)')"
printf '  %s\n' "${results[@]}"
