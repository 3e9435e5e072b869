#!/usr/bin/env bash
# Demo: `meridian info`, `bench comm`, then a synthetic dataset made by all
# ranks (prep synthetic), validated (inspect), read back through the loader (bench io) and used to
# train the tiny SigLIP preset for a few steps.
# Nothing is downloaded. Writes to ${DEMO_DIR:-/tmp/meridian-demo}.
# Usage: jobs/demo.sh [ranks (default 2)] [build dir (default build)]
#   HOSTFILE=hosts jobs/demo.sh 8     runs across the hosts of an Open MPI hostfile
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
np=${1:-2}
build=${2:-$root/build}
bin=$build/meridian
[[ -x $bin ]] || { echo "demo.sh: $bin not found; build first (tests/run.sh or cmake --build)" >&2; exit 2; }
args=(-np "$np")
[[ -n ${HOSTFILE:-} ]] && args+=(--hostfile "$HOSTFILE")
(( np > $(nproc) )) && [[ -z ${HOSTFILE:-} ]] && args+=(--oversubscribe)
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$bin" --version
mpirun "${args[@]}" "$bin" info
mpirun "${args[@]}" "$bin" bench comm --min-bytes 1K --max-bytes 64M --factor 4 \
  --ops allreduce,allgather,reduce_scatter,broadcast

dir=${DEMO_DIR:-/tmp/meridian-demo}
mkdir -p "$dir"
mpirun "${args[@]}" "$bin" prep synthetic --count 512 --seed 1 --size 128 --out "$dir/synthetic.h5" --overwrite \
  --vocab-size 500 --context-length 32
"$bin" inspect "$dir/synthetic.h5" --samples 2
mpirun "${args[@]}" "$bin" bench io "$dir/synthetic.h5" --batch 16 --steps 20
mpirun "${args[@]}" "$bin" train --config "$root/jobs/configs/siglip-tiny.yaml" --data "$dir/synthetic.h5" \
  --set train.steps=20 --set train.batch=16 --set train.log_every=5
