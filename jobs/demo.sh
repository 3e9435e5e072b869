#!/usr/bin/env bash
# The demo, README's main command: installs what is missing (jobs/setup-node.sh), builds, makes a
# synthetic image-text dataset and a held-out split with all ranks, trains the tiny SigLIP on
# `ranks` ranks (jobs/configs/demo.yaml, about 2 minutes on 2 cores), and prints retrieval recall
# and zero-shot accuracy on the held-out split before and after training.
# Nothing is downloaded. Writes to ${DEMO_DIR:-/tmp/meridian-demo}.
# Usage: jobs/demo.sh [ranks (default 2)] [build dir (default build)]
#   HOSTFILE=hosts jobs/demo.sh 8     runs across the hosts of an Open MPI hostfile
#   SKIP_SETUP=1                      do not run jobs/setup-node.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
np=${1:-2}
build=${2:-$root/build}
bin=$build/meridian
started=$(date +%s)
step() { echo; echo "== $* ($(( $(date +%s) - started )) s)"; }

if [[ -z ${SKIP_SETUP:-} ]]; then
  step "dependencies (jobs/setup-node.sh)"
  "$root/jobs/setup-node.sh"
fi
step "build ($build)"
[[ -f $build/build.ninja ]] || cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target meridian -j "$(nproc)"

args=(-np "$np")
[[ -n ${HOSTFILE:-} ]] && args+=(--hostfile "$HOSTFILE")
(( np > $(nproc) )) && [[ -z ${HOSTFILE:-} ]] && args+=(--oversubscribe)
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$bin" --version
mpirun "${args[@]}" "$bin" info

dir=${DEMO_DIR:-/tmp/meridian-demo}
mkdir -p "$dir"
step "prep synthetic: 2048 training scenes and 256 held-out ones (same tokenizer)"
mpirun "${args[@]}" "$bin" prep synthetic --count 2048 --seed 1 --size 128 --vocab-size 500 --context-length 32 \
  --out "$dir/train.h5" --overwrite
mpirun "${args[@]}" "$bin" prep synthetic --count 256 --seed 2 --size 128 --context-length 32 \
  --tokenizer "$dir/train.h5" --out "$dir/heldout.h5" --overwrite
"$bin" inspect "$dir/heldout.h5" --samples 1

step "train (jobs/configs/demo.yaml) with evaluation on the held-out split before and after"
mpirun "${args[@]}" "$bin" train --config "$root/jobs/configs/demo.yaml" --data "$dir/train.h5" \
  --set data.eval="$dir/heldout.h5" --run-dir "$dir/run" | tee "$dir/train.out"

step "result"
grep -E "^eval (before|after):" "$dir/train.out"
echo "(i2t/t2i_rK: image->text / text->image recall@K in %; chance R@10 about 4% over 256 images;"
echo " zero_shot: top-1 accuracy in % over 10 scene classes, chance 10%)"
echo "run directory: $dir/run (config.yaml, metrics.csv, tensorboard/, logs/)"
