#!/usr/bin/env bash
# The whole suite under AddressSanitizer and UndefinedBehaviorSanitizer (issue 55): meridian, its
# libraries and tests instrumented by g++; LibTorch, OpenCV, HDF5, Open MPI and Python are not. Every
# process the tests start runs instrumented (mpirun's ranks too). Not part of tests/run.sh: the build
# and the run take about three times the test command (docs/testing.md).
#
#   tests/sanitize.sh [BUILD] [CTEST ARGS...]     (default BUILD: build-sanitize beside the sources)
#
# Suppressions, each with its reason: tests/sanitize.supp (UBSan). ASAN_OPTIONS:
#   detect_leaks=0        Open MPI, HDF5 and LibTorch keep process-lifetime allocations that
#                         LeakSanitizer reports at every exit; meridian's objects are RAII
#   protect_shadow_gap=0  the CUDA runtime LibTorch loads maps memory where ASan's shadow gap is
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-sanitize}
shift || true
flags="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Sanitize -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" -DMERIDIAN_SANITIZE=ON
cmake --build "$build" -j "$(nproc)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Every report also goes to a file of its own: a process that a test expects to fail (a killed rank,
# a refused input) would otherwise hide a report behind the exit status the test accepts.
reports=$build/sanitizer-reports
rm -rf "$reports" && mkdir -p "$reports"
export ASAN_OPTIONS=detect_leaks=0:protect_shadow_gap=0:abort_on_error=1:log_path=$reports/asan
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions=$root/tests/sanitize.supp:log_path=$reports/ubsan
cd "$build"
rc=0
ctest --output-on-failure -j "$((3 * $(nproc)))" --timeout 1800 "$@" || rc=$?
if compgen -G "$reports/*" >/dev/null; then
  echo "sanitize.sh: sanitizer reports (some from processes whose failure a test accepts):"
  for f in "$reports"/*; do echo "== $f"; head -40 "$f"; done
  exit 1
fi
exit $rc
