#!/usr/bin/env bash
# Two builds of meridian against each other on the CPU, for the three tasks in float32 and bf16:
# `meridian bench train` on 2 ranks bound to a core each, 1 thread, run alternately (A, B, A, B) so that
# the machine's drift falls on both. Prints samples/s of every run and B / A per pair and overall
# (geometric mean of the pairs). Tasks and data as jobs/bench/bf16.sh:
#   SigLIP tiny   jobs/configs/ucm-siglip-tiny.yaml on UCM at 128 px, batch 32/rank
#   detect        jobs/configs/detect-synthetic.yaml (YOLO12n) on synthetic 128 px scenes, batch 16/rank
#   lm            jobs/configs/lm-100m.yaml (110M parameters) on synthetic instructions, 2 x 128 tokens/rank
# Usage: jobs/bench/compare-builds.sh BIN_A BIN_B [steps (default 20)] [pairs (default 2)]
#   BIN_A, BIN_B: meridian executables (e.g. a copy of build/meridian from before a change, and build/meridian)
# Environment: BENCH_DIR (default /tmp/meridian-bench-bf16, shared with bf16.sh) keeps the prepared data;
# TASKS (default "siglip detect lm") and PRECISIONS (default "float32 bf16") choose the runs.
# samples/s here: 2 ranks x the batch per rank / the mean step time (bench train's own figure has one
# decimal, too coarse for lm's 1-3 samples/s).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
[[ $# -ge 2 ]] || { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
a=$1 b=$2 steps=${3:-20} pairs=${4:-2}
for bin in "$a" "$b"; do [[ -x $bin ]] || { echo "compare-builds.sh: $bin is not an executable" >&2; exit 2; }; done
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dir=${BENCH_DIR:-/tmp/meridian-bench-bf16}
mkdir -p "$dir"
prep=(mpirun --oversubscribe -np 2 "$b" prep)
ucm=$root/../shared/data/ucm-captions
if [[ ! -f $dir/ucm-128.h5 ]]; then
  [[ -f $ucm/captions.jsonl ]] || { echo "compare-builds.sh: no $ucm" >&2; exit 2; }
  "${prep[@]}" image-text --images "$ucm" --captions "$ucm/captions.jsonl" --split train --size 128 \
    --context-length 32 --vocab-size 8000 --out "$dir/ucm-128.h5" --log-level warn
fi
[[ -f $dir/det.h5 ]] || "${prep[@]}" synthetic --kind detection --count 512 --size 128 --out "$dir/det.h5" --log-level warn
[[ -f $dir/text.h5 ]] || "${prep[@]}" synthetic --kind text --count 2000 --out "$dir/text.h5" --log-level warn
declare -A config=([siglip]=ucm-siglip-tiny.yaml [detect]=detect-synthetic.yaml [lm]=lm-100m.yaml)
declare -A data=([siglip]=ucm-128.h5 [detect]=det.h5 [lm]=text.h5)
declare -A extra=([siglip]="--set model.vocab_size=520" [detect]="--set train.ema=0" [lm]="")
declare -A batch=([siglip]=32 [detect]=16 [lm]=2)  # samples per rank per step (the configs')
ratios=()
rate() {  # BIN TASK PRECISION: samples/s of one bench train, from its mean step time (more digits)
  local out step
  # shellcheck disable=SC2086
  out=$(mpirun -np 2 --bind-to core "$1" bench train --config "$root/jobs/configs/${config[$2]}" \
    --data "$dir/${data[$2]}" --threads 1 ${extra[$2]} --set train.steps=$((steps + 1)) \
    --set train.precision="$3" --set train.log_every=1000 --set train.eval_every=0 \
    --set train.health_every=0 --log-level warn 2>&1) || { echo "$out" | tail >&2; exit 1; }
  step=$(grep -oE 'samples/s \([0-9.]+ per rank\), step [0-9.]+ ms' <<<"$out" | grep -oE '[0-9.]+ ms' | grep -oE '[0-9.]+')
  python3 -c "print(f'{$4 * 2 / ($step / 1e3):.2f}')"
}
for task in ${TASKS:-siglip detect lm}; do
  for precision in ${PRECISIONS:-float32 bf16}; do
    for ((pair = 1; pair <= pairs; ++pair)); do
      ra=$(rate "$a" $task $precision "${batch[$task]}")
      rb=$(rate "$b" $task $precision "${batch[$task]}")
      ratio=$(python3 -c "print(f'{$rb / $ra:.3f}')")
      ratios+=("$ratio")
      echo "$task $precision pair $pair: A $ra, B $rb samples/s: B / A = $ratio"
    done
  done
done
python3 -c "import math,sys; r=[float(x) for x in sys.argv[1:]]; print(f'B / A over {len(r)} pairs: geometric mean {math.exp(sum(map(math.log, r)) / len(r)):.3f}, range {min(r):.3f}-{max(r):.3f}')" "${ratios[@]}"
