#!/usr/bin/env bash
# The one-host SigLIP tiny speed goal, measured back to back in one run: meridian (`bench train` with
# jobs/configs/ucm-siglip-tiny.yaml on the prepared UCM training split at 128 px, 2 ranks under mpirun,
# one core and one thread each, batch 32 per rank) against the PyTorch DDP (gloo) reference written as
# PyTorch users write it (jobs/bench/siglip_torch_ref.py through torch-ddp-reference.sh, ranks pinned
# the same way), in float32 and then both with bf16 autocast. Prints each one's samples/s and the ratios.
# Usage: jobs/bench/siglip-vs-torch.sh [steps (default 30)] [build dir (default build)]
# Environment: DATA (a dataset prepared at 128 px with a vocabulary of at most 520; default prepared
# once from ../shared/data/ucm-captions into $BENCH_DIR, default /tmp/meridian-bench-train).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/jobs/python-env.sh"
steps=${1:-30}
bin=${2:-$root/build}/meridian
[[ -x $bin ]] || { echo "siglip-vs-torch.sh: $bin not found; build first" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dir=${BENCH_DIR:-/tmp/meridian-bench-train}
mkdir -p "$dir"
data=${DATA:-$dir/ucm-train-128.h5}
ucm=$root/../shared/data/ucm-captions
if [[ ! -f $data ]]; then
  [[ -f $ucm/captions.jsonl ]] || { echo "siglip-vs-torch.sh: no DATA and no $ucm" >&2; exit 2; }
  mpirun --oversubscribe -np 2 "$bin" prep image-text --images "$ucm" --captions "$ucm/captions.jsonl" --split train \
    --size 128 --context-length 32 --vocab-size 8000 --out "$data" --log-level warn
fi
samples() { grep -oE "$1" | grep -oE '[0-9.]+ samples/s' | grep -oE '^[0-9.]+' | head -1; }
declare -A rate
for precision in float32 bf16; do
  out=$(mpirun -np 2 --bind-to core "$bin" bench train --config "$root/jobs/configs/ucm-siglip-tiny.yaml" --data "$data" \
        --threads 1 --set model.vocab_size=520 --set train.steps=$((steps + 1)) --set train.precision=$precision \
        --set train.log_every=1000 --set train.eval_every=0 --set train.health_every=0 --log-level warn)
  echo "$out"
  rate[meridian_$precision]=$(samples 'bench train: 2 ranks, [0-9.]+ samples/s' <<<"$out")
  flag=(); [[ $precision == bf16 ]] && flag=(--bf16)
  out=$(bash "$root/jobs/bench/torch-ddp-reference.sh" --steps "$steps" --batch 32 --threads 1 --vocab 520 "${flag[@]}")
  echo "$out" | tail -1
  rate[torch_$precision]=$(grep -oE 'torch_ddp samples/s [0-9.]+' <<<"$out" | grep -oE '[0-9.]+$')
done
for precision in float32 bf16; do
  m=${rate[meridian_$precision]} t=${rate[torch_$precision]}
  echo "siglip tiny $precision: meridian $m samples/s, PyTorch DDP $t samples/s, ratio $(python3 -c "print(f'{$m / $t:.2f}')")"
done
