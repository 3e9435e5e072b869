#!/usr/bin/env bash
# ZeRO stages against DistributedDataParallel on one model, N ranks of one host (docs/performance.md,
# "Models that don't fit"): `meridian bench train` step time and its breakdown for optim.zero 0-3
# (3 also with activation checkpointing), then the checkpoint stall of `meridian train` with
# synchronous and asynchronous saves of the same state.
# Usage: jobs/bench/zero-stages.sh [NP] [CONFIG] [STEPS]   (run from the repository root, build/ built)
set -eu
np=${1:-2} config=${2:-jobs/configs/lm-100m.yaml} steps=${3:-8}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mpirun --oversubscribe -np "$np" build/meridian prep synthetic --kind text --count 2000 --out "$tmp/text.h5" \
  --log-level warn >/dev/null
bench() {  # bench LABEL [--set ...]
  local label=$1
  shift
  echo "== $label"
  mpirun --oversubscribe -np "$np" build/meridian bench train --config "$config" --data "$tmp/text.h5" \
    --set train.steps="$steps" --set train.health_every=0 --log-level warn "$@" 2>&1 | grep "^bench train: [0-9]* ranks"
}
bench "DDP (optim.zero 0)" --set optim.zero=0
bench "ZeRO-1" --set optim.zero=1
bench "ZeRO-2" --set optim.zero=2
bench "ZeRO-3" --set optim.zero=3
bench "ZeRO-3 + activation checkpointing" --set optim.zero=3 --set train.activation_checkpointing=true
bench "DDP + activation checkpointing" --set optim.zero=0 --set train.activation_checkpointing=true
# The checkpoint stall: the same state saved every 2 steps, synchronously and in the background.
for mode in false true; do
  echo "== checkpoint.async: $mode"
  mpirun --oversubscribe -np "$np" build/meridian train --config "$config" --data "$tmp/text.h5" --set train.steps=6 \
    --set train.health_every=0 --set checkpoint.every_steps=2 --set checkpoint.async=$mode --set checkpoint.keep_last=1 \
    --run-dir "$tmp/run_$mode" --log-level info 2>&1 | grep -E "checkpoint .*(written|copied)" | sed 's/^.*\[info\] //'
  du -sh "$tmp/run_$mode/checkpoints/"*.h5 | tail -1
done
