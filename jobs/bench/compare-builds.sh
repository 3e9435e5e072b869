#!/usr/bin/env bash
# Two builds of meridian against each other on the CPU, for the three tasks in float32 and bf16:
# `meridian bench train` on 2 ranks bound to a core each, 1 thread, run alternately (A, B, A, B) so that
# the machine's drift falls on both. Prints samples/s of every run and B / A per pair and overall
# (geometric mean of the pairs). The tasks and their data: jobs/bench/three-tasks.sh (SigLIP tiny on UCM
# 128 px, YOLO12n, lm-100m).
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
me=compare-builds.sh
source "$root/jobs/bench/three-tasks.sh"
prepare_data "$b"
ratios=()
rate() {  # BIN TASK PRECISION: samples/s of one bench train, from its mean step time (more digits)
  local out step
  out=$(bench_task "$1" "$2" "$3" "$steps") || exit 1
  step=$(grep -oE 'samples/s \([0-9.]+ per rank\), step [0-9.]+ ms' <<<"$out" | grep -oE '[0-9.]+ ms' | grep -oE '[0-9.]+')
  python3 -c "print(f'{${batch[$2]} * 2 / ($step / 1e3):.2f}')"
}
for task in ${TASKS:-siglip detect lm}; do
  for precision in ${PRECISIONS:-float32 bf16}; do
    for ((pair = 1; pair <= pairs; ++pair)); do
      ra=$(rate "$a" $task $precision)
      rb=$(rate "$b" $task $precision)
      ratio=$(python3 -c "print(f'{$rb / $ra:.3f}')")
      ratios+=("$ratio")
      echo "$task $precision pair $pair: A $ra, B $rb samples/s: B / A = $ratio"
    done
  done
done
python3 -c "import math,sys; r=[float(x) for x in sys.argv[1:]]; print(f'B / A over {len(r)} pairs: geometric mean {math.exp(sum(map(math.log, r)) / len(r)):.3f}, range {min(r):.3f}-{max(r):.3f}')" "${ratios[@]}"
