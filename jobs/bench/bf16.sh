#!/usr/bin/env bash
# bf16 against float32 for the three tasks, measured alternately in one run (float32, bf16, float32,
# bf16 for each): `meridian bench train` on 2 ranks bound to a core each, 1 thread, and every rank's
# GEMM rate first (`meridian bench gemm`, the peak MFU is reported against). Prints samples/s, MFU and
# the bf16/float32 ratio of each pair.
# The tasks and their data: jobs/bench/three-tasks.sh (SigLIP tiny on UCM 128 px, YOLO12n, lm-100m).
# Usage: jobs/bench/bf16.sh [steps (default 20)] [build dir (default build)]
# Environment: BENCH_DIR (default /tmp/meridian-bench-bf16) keeps the prepared data between runs.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/jobs/python-env.sh"
steps=${1:-20}
bin=${2:-$root/build}/meridian
[[ -x $bin ]] || { echo "bf16.sh: $bin not found; build first" >&2; exit 2; }
me=bf16.sh
source "$root/jobs/bench/three-tasks.sh"
prepare_data "$bin"
mpirun -np 2 --bind-to core "$bin" bench gemm --threads 1
for task in siglip detect lm; do
  for pair in 1 2; do
    declare -A rate=()
    for precision in float32 bf16; do
      out=$(bench_task "$bin" $task $precision "$steps")
      rate[$precision]=$(grep -oE 'bench train: 2 ranks, [0-9.]+' <<<"$out" | grep -oE '[0-9.]+$')
      mfu=$(grep -oE 'MFU [0-9.]+%' <<<"$out")
      step=$(grep -oE 'step [0-9.]+ ms: .*' <<<"$out" | head -1)
      echo "$task $precision pair $pair: ${rate[$precision]} samples/s, $mfu; $step"
    done
    echo "$task pair $pair: bf16 / float32 = $(python3 -c "print(f'{${rate[bf16]} / ${rate[float32]}:.2f}')")"
  done
done
