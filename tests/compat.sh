#!/usr/bin/env bash
# The whole project on the other LibTorch track: builds it from scratch in the track's own Python
# environment and build directory and runs the whole suite there, as tests/run.sh does for the default.
# CI runs the default track (cu13); run this before changing anything that LibTorch's version or CUDA
# touches (docs/running.md, "GPUs, drivers and tracks").
# Usage: tests/compat.sh [TRACK] [-- CTEST ARGS...]   (TRACK default cu128; environment
#        MERIDIAN_COMPAT_VENV, default /opt/meridian/venv-TRACK; build directory build-TRACK, made anew)
# Prints the setup, build and ctest times and exits with ctest's status.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
track=cu128
if [[ $# -gt 0 && $1 != -- ]]; then track=$1; shift; fi
[[ ${1:-} == -- ]] && shift
grep -qP "^$track\t" "$root/jobs/torch-tracks.tsv" || { echo "compat.sh: no track '$track' in jobs/torch-tracks.tsv" >&2; exit 2; }
export MERIDIAN_TORCH_TRACK=$track
export MERIDIAN_VENV=${MERIDIAN_COMPAT_VENV:-/opt/meridian/venv-$track}
build=$root/build-$track
start=$SECONDS
bash "$root/jobs/setup-node.sh"
setup=$((SECONDS - start))
rm -rf "$build"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DMERIDIAN_VENV="$MERIDIAN_VENV"
grep -q "^#define MERIDIAN_TORCH_TRACK \"$track\"" "$build/include/meridian/build_config.h" ||
  { echo "compat.sh: the build in $build is not of track $track" >&2; exit 1; }
cmake --build "$build" -j "$(nproc)"
built=$((SECONDS - start - setup))
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$build"
rc=0
ctest --output-on-failure -j "$((3 * $(nproc)))" --timeout 900 "$@" || rc=$?
echo "compat.sh: track $track: setup $setup s, configure + build $built s, ctest $((SECONDS - start - setup - built)) s, exit $rc"
exit "$rc"
