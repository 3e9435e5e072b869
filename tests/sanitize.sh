#!/usr/bin/env bash
# The suite under the sanitizers (issue 55): meridian, its libraries and tests instrumented by g++;
# LibTorch, OpenCV, HDF5, Open MPI and Python are not. Every process the tests start runs
# instrumented (mpirun's ranks too). Not part of tests/run.sh: the build and the run take about three
# times the test command (docs/testing.md).
#
#   tests/sanitize.sh [--thread] [BUILD] [CTEST ARGS...]
#     (default)  AddressSanitizer + UndefinedBehaviorSanitizer, the whole suite (BUILD: build-sanitize)
#     --thread   ThreadSanitizer, the tests labelled `threads`, those that run meridian's own threads
#                (tests/CMakeLists.txt; BUILD: build-tsan)
#
# Suppressions, each with its reason: tests/sanitize.supp (UBSan), tests/tsan.supp (TSan). ASAN_OPTIONS:
#   detect_leaks=0        Open MPI, HDF5 and LibTorch keep process-lifetime allocations that
#                         LeakSanitizer reports at every exit; meridian's objects are RAII
#   protect_shadow_gap=0  the CUDA runtime LibTorch loads maps memory where ASan's shadow gap is
# ThreadSanitizer runs with OMP_NUM_THREADS=1: LibTorch's OpenMP regions (uninstrumented libgomp, whose
# barriers TSan cannot see) then run inline on the calling thread; docs/testing.md says what TSan
# cannot see.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=address
if [[ ${1:-} == --thread ]]; then
  mode=thread
  shift
fi
if [[ $mode == thread ]]; then
  build=${1:-$root/build-tsan}
  sanitize=thread
else
  build=${1:-$root/build-sanitize}
  sanitize=address,undefined
fi
shift || true
flags="-O1 -g -fno-omit-frame-pointer -fsanitize=$sanitize"
[[ $mode == thread ]] || flags+=" -fno-sanitize-recover=undefined"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Sanitize -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=$sanitize" \
  -DMERIDIAN_SANITIZE=ON
cmake --build "$build" -j "$(nproc)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Every report also goes to a file of its own: a process that a test expects to fail (a killed rank,
# a refused input) would otherwise hide a report behind the exit status the test accepts.
reports=$build/sanitizer-reports
rm -rf "$reports" && mkdir -p "$reports"
cd "$build"
rc=0
if [[ $mode == thread ]]; then
  # second_deadlock_stack: both stacks of a lock-order inversion. halt_on_error=0: every report of a
  # process, not only its first. ignore_noninstrumented_modules: the memory accesses of intercepted
  # calls (memcpy, pread) made inside uninstrumented libraries are not checked: Open MPI and HDF5
  # copy into meridian's buffers from whichever thread progresses a request, ordered by their own
  # atomics, which TSan does not see (and it often cannot restore those threads' stacks, so a
  # suppression cannot name them). meridian's own accesses, and the locks everyone takes, still are.
  export TSAN_OPTIONS=second_deadlock_stack=1:halt_on_error=0:ignore_noninstrumented_modules=1:suppressions=$root/tests/tsan.supp:log_path=$reports/tsan
  export OMP_NUM_THREADS=1
  ctest --output-on-failure -L threads -j "$(nproc)" --timeout 1800 "$@" || rc=$?
else
  export ASAN_OPTIONS=detect_leaks=0:protect_shadow_gap=0:abort_on_error=1:log_path=$reports/asan
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions=$root/tests/sanitize.supp:log_path=$reports/ubsan
  ctest --output-on-failure -j "$((3 * $(nproc)))" --timeout 1800 "$@" || rc=$?
fi
if compgen -G "$reports/*" >/dev/null; then
  echo "sanitize.sh: sanitizer reports (some from processes whose failure a test accepts):"
  for f in "$reports"/*; do echo "== $f"; head -60 "$f"; done
  exit 1
fi
exit $rc
