#!/usr/bin/env bash
# bf16 against float32 for the three tasks, measured alternately in one run (float32, bf16, float32,
# bf16 for each): `meridian bench train` on 2 ranks bound to a core each, 1 thread, and every rank's
# GEMM rate first (`meridian bench gemm`, the peak MFU is reported against). Prints samples/s, MFU and
# the bf16/float32 ratio of each pair.
#   SigLIP tiny   jobs/configs/ucm-siglip-tiny.yaml on UCM at 128 px (the issue's setup), batch 32/rank
#   detect        jobs/configs/detect-synthetic.yaml (YOLO12n) on synthetic 128 px scenes, batch 16/rank
#   lm            jobs/configs/lm-100m.yaml (110M parameters) on synthetic instructions, 2 x 128 tokens/rank
# Usage: jobs/bench/bf16.sh [steps (default 20)] [build dir (default build)]
# Environment: BENCH_DIR (default /tmp/meridian-bench-bf16) keeps the prepared data between runs.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/jobs/python-env.sh"
steps=${1:-20}
bin=${2:-$root/build}/meridian
[[ -x $bin ]] || { echo "bf16.sh: $bin not found; build first" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dir=${BENCH_DIR:-/tmp/meridian-bench-bf16}
mkdir -p "$dir"
prep=(mpirun --oversubscribe -np 2 "$bin" prep)
ucm=$root/../shared/data/ucm-captions
if [[ ! -f $dir/ucm-128.h5 ]]; then
  [[ -f $ucm/captions.jsonl ]] || { echo "bf16.sh: no $ucm" >&2; exit 2; }
  "${prep[@]}" image-text --images "$ucm" --captions "$ucm/captions.jsonl" --split train --size 128 \
    --context-length 32 --vocab-size 8000 --out "$dir/ucm-128.h5" --log-level warn
fi
[[ -f $dir/det.h5 ]] || "${prep[@]}" synthetic --kind detection --count 512 --size 128 --out "$dir/det.h5" --log-level warn
[[ -f $dir/text.h5 ]] || "${prep[@]}" synthetic --kind text --count 2000 --out "$dir/text.h5" --log-level warn
mpirun -np 2 --bind-to core "$bin" bench gemm --threads 1
declare -A config=([siglip]=ucm-siglip-tiny.yaml [detect]=detect-synthetic.yaml [lm]=lm-100m.yaml)
declare -A data=([siglip]=ucm-128.h5 [detect]=det.h5 [lm]=text.h5)
declare -A extra=([siglip]="--set model.vocab_size=520" [detect]="--set train.ema=0" [lm]="")
for task in siglip detect lm; do
  for pair in 1 2; do
    declare -A rate=()
    for precision in float32 bf16; do
      # shellcheck disable=SC2086
      out=$(mpirun -np 2 --bind-to core "$bin" bench train --config "$root/jobs/configs/${config[$task]}" \
        --data "$dir/${data[$task]}" --threads 1 ${extra[$task]} --set train.steps=$((steps + 1)) \
        --set train.precision=$precision --set train.log_every=1000 --set train.eval_every=0 \
        --set train.health_every=0 --log-level warn 2>&1) || { echo "$out" | tail; exit 1; }
      rate[$precision]=$(grep -oE 'bench train: 2 ranks, [0-9.]+' <<<"$out" | grep -oE '[0-9.]+$')
      mfu=$(grep -oE 'MFU [0-9.]+%' <<<"$out")
      step=$(grep -oE 'step [0-9.]+ ms: .*' <<<"$out" | head -1)
      echo "$task $precision pair $pair: ${rate[$precision]} samples/s, $mfu; $step"
    done
    echo "$task pair $pair: bf16 / float32 = $(python3 -c "print(f'{${rate[bf16]} / ${rate[float32]}:.2f}')")"
  done
done
