#!/usr/bin/env bash
# Raw pixels against JPEG columns (prep --encode jpeg) on UC Merced, measured in one run:
#  1. bytes per image at 256 px: raw, JPEG with the input JPEGs kept, every image re-encoded at q90;
#  2. `bench io` on each 256-px file (2 ranks, random vs sequential, augment, data.workers 1 and 2);
#  3. `bench train` data wait on the JPEG file (2 ranks, SigLIP tiny at 256 px, batch 32 per rank);
#  4. SigLIP tiny (jobs/configs/ucm-siglip-tiny.yaml, 128 px) trained STEPS steps on the raw and the
#     JPEG (q90) train split from seed 0, and on raw from seed 1 (the noise), evaluated on the test
#     split of the same encoding: retrieval recall and zero-shot accuracy of each.
# Usage: jobs/bench/jpeg-vs-raw.sh [steps (default 600)] [build dir (default build)]
# Environment: BENCH_DIR (default /tmp/meridian-bench-jpeg), PARTS (default "1 2 3 4": which parts).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
steps=${1:-600}
bin=${2:-$root/build}/meridian
[[ -x $bin ]] || { echo "jpeg-vs-raw.sh: $bin not found; build first" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ucm=$root/../shared/data/ucm-captions
[[ -f $ucm/captions.jsonl ]] || { echo "jpeg-vs-raw.sh: $ucm not found" >&2; exit 2; }
dir=${BENCH_DIR:-/tmp/meridian-bench-jpeg}
parts=${PARTS:-1 2 3 4}
mkdir -p "$dir"
mpi=(mpirun --oversubscribe -np 2)
prep() {  # prep OUT ARGS...
  local out=$1; shift
  [[ -f $out ]] || "${mpi[@]}" "$bin" prep image-text --images "$ucm" --captions "$ucm/captions.jsonl" --out "$out" \
    --log-level warn "$@" >/dev/null
}
want() { [[ " $parts " == *" $1 "* ]]; }

prep "$dir/raw256.h5" --size 256
prep "$dir/jpeg256.h5" --size 256 --encode jpeg --tokenizer "$dir/raw256.h5"
if want 1; then
  prep "$dir/q90-256.h5" --size 256 --encode jpeg --tokenizer "$dir/raw256.h5" --quality 90 --reencode
  echo "## bytes per image at 256 px (2100 images)"
  for f in raw256 jpeg256 q90-256; do
    "$bin" inspect "$dir/$f.h5" --samples 0 | grep -E "^  images" | sed "s/^/$f: /"
  done
fi
if want 2; then
  echo "## bench io, 2 ranks, batch 32, augment"
  for f in raw256 jpeg256; do
    for w in 1 2; do
      echo "# $f, data.workers $w"
      "${mpi[@]}" "$bin" bench io "$dir/$f.h5" --batch 32 --steps 60 --augment --workers "$w" --io-driver posix |
        grep -E "^ +(0|1|all) "
    done
  done
fi
if want 3; then
  echo "## bench train, 2 ranks, SigLIP tiny at 256 px, data wait"
  for f in raw256 jpeg256; do
    "${mpi[@]}" --bind-to core "$bin" bench train --config "$root/jobs/configs/ucm-siglip-tiny.yaml" --data "$dir/$f.h5" \
      --threads 1 --set model.image_size=256 --set model.vocab_size=600 --set train.steps=21 --set data.workers=1 \
      --set train.log_every=1000 --set train.eval_every=0 --set train.health_every=0 --log-level warn |
      grep -E "samples/s|data" | sed "s/^/$f: /"
  done
fi
if want 4; then
  echo "## SigLIP tiny at 128 px, $steps steps, raw against JPEG q90"
  prep "$dir/raw128-train.h5" --size 128 --context-length 32 --split train
  prep "$dir/raw128-test.h5" --size 128 --context-length 32 --split test --tokenizer "$dir/raw128-train.h5"
  prep "$dir/jpeg128-train.h5" --size 128 --context-length 32 --split train --tokenizer "$dir/raw128-train.h5" --encode jpeg
  prep "$dir/jpeg128-test.h5" --size 128 --context-length 32 --split test --tokenizer "$dir/raw128-train.h5" --encode jpeg
  # raw and JPEG from seed 0, and raw from seed 1: how far two raw runs differ is the noise.
  for run in raw128:0 jpeg128:0 raw128:1; do
    f=${run%:*} seed=${run#*:}
    rm -rf "$dir/run-$f-$seed"
    "${mpi[@]}" "$bin" train --config "$root/jobs/configs/ucm-siglip-tiny.yaml" --data "$dir/$f-train.h5" \
      --run-dir "$dir/run-$f-$seed" --threads 1 --set data.eval="$dir/$f-test.h5" --set train.steps="$steps" \
      --set train.seed="$seed" --set train.eval_every="$steps" --set train.eval_at_start=false \
      --set train.log_every=100 --log-level warn >/dev/null
    echo "$f seed $seed: $(grep -E "^$steps,.*eval/" "$dir/run-$f-$seed/metrics.csv" | cut -d, -f3,4 | tr '\n' ' ')"
  done
fi
