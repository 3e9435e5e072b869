#!/usr/bin/env bash
# What keeping RUN_DIR/report.html costs a training run: `meridian train` (SigLIP tiny, 2 ranks bound
# to a core each, 1 thread, an evaluation every 5 steps, so a page after each) with train.report false
# and true, alternately, twice each:
#   fresh    a new run directory (a page of some hundred rows: milliseconds)
#   1M rows  the run directory of a long run: metrics.csv holds a million rows before the start, so
#            every page reads them (about 2 s of one core each, on rank 0's core here: the worst case;
#            a GPU node has idle cores for it)
# Prints each run's mean step time (train/step_s over steps 6..N: the evaluations and the pages are
# outside the steps, the page thread is not) and wall time per step between the first and the last
# step, and how long `meridian report` takes to write the page of the run directory.
# Usage: jobs/bench/report.sh [steps (default 40)] [build dir (default build)]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/jobs/python-env.sh"
steps=${1:-40}
bin=${2:-$root/build}/meridian
[[ -x $bin ]] || { echo "report.sh: $bin not found; build first" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dir=$(mktemp -d /tmp/meridian-bench-report.XXXXXX)
trap 'rm -rf "$dir"' EXIT
mpirun --oversubscribe -np 2 "$bin" prep synthetic --kind image-text --count 512 --size 64 --out "$dir/it.h5" \
  --log-level warn >/dev/null
python3 - "$dir/big.csv" <<'PY'
import math, sys
names = ["loss", "lr", "grad_norm", "samples_per_s", "samples_per_s_per_rank", "data_s", "forward_s", "backward_s",
         "comm_s", "optimizer_s", "step_s", "bad_steps", "mfu", "epoch", "temperature"]
with open(sys.argv[1], "w") as f:
    f.write("step,wall_time,name,value\n")
    for i in range(10**6):
        step = i // len(names) + 1
        f.write(f"{-10**6 + step},{1.7e9 + step:.3f},train/{names[i % len(names)]},{math.exp(-step / 2e4):.9g}\n")
PY

# run NAME REPORT BIG: one training run; prints its step time.
run() {
  local name=$1 report=$2 big=$3 out=$dir/$1
  mkdir -p "$out"
  [[ $big == 1 ]] && cp "$dir/big.csv" "$out/metrics.csv"
  mpirun -np 2 --bind-to core "$bin" train --threads 1 --config "$root/jobs/configs/siglip-tiny.yaml" \
    --data "$dir/it.h5" --set data.eval="$dir/it.h5" --set model.image_size=64 --set train.batch=8 \
    --set train.steps="$steps" --set train.log_every=1 --set train.eval_every=5 --set train.health_every=10 \
    --set train.report="$report" --set checkpoint.every_steps=1000 --run-dir "$out" --log-level warn \
    >"$out.log" 2>&1 || { tail "$out.log"; exit 1; }
  python3 - "$out/metrics.csv" "$name" "$report" <<'PY'
import sys
rows = [l.split(",") for l in open(sys.argv[1]).read().splitlines()[1:]]
rows = [(int(s), float(w), n, float(v)) for s, w, n, v in rows if int(s) > 0]
step_s = [v for s, w, n, v in rows if n == "train/step_s" and s > 5]
walls = [w for s, w, n, v in rows if n == "train/step_s"]
print(f"{sys.argv[2]:<22} report {sys.argv[3]:<5}  step {1e3 * sum(step_s) / len(step_s):7.1f} ms  "
      f"wall {1e3 * (walls[-1] - walls[0]) / (len(walls) - 1):7.1f} ms per step")
PY
}

for setup in fresh 1M; do
  big=0
  [[ $setup == 1M ]] && big=1
  for pair in 1 2; do
    run "$setup-off-$pair" false $big
    run "$setup-on-$pair" true $big
  done
  "$bin" report "$dir/$setup-on-1" --out "$dir/page.html" | head -1
done
