#!/usr/bin/env bash
# Usage: tests/profile.sh [--build DIR] [--keep] [-R REGEX] [-j N]
# Where the test command's time goes. Builds from scratch in DIR (default build-profile/, removed first
# unless --keep) as tests/run.sh does, then runs the suite once with ctest as tests/run.sh runs it (-j
# 3 x cores, RUN_SERIAL honoured), each test under `perf stat` (tests/tools/profile_report.py reads
# what it wrote). Prints:
#   - the build: its wall time, each unity batch and the slowest objects with their compile time, the
#     links, and the critical path (the chain of steps, each waiting on the one before, that ended last);
#   - per test: wall and CPU time (every process it started, children of children included), the mean
#     cores busy, the processes it forked and the programs it exec'd, and the time it waited: the
#     250 ms intervals in which all of its processes together used under 5 % of a core (sleeps,
#     timeouts, cut links, a rank waiting for another test's CPU is not counted: it is runnable).
# Needs perf (linux-perf) and root or perf_event_paranoid <= 0 for the scheduler tracepoints.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-profile keep=0 jobs=$((3 * $(nproc))) select=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$(realpath -m "$2"); shift 2 ;;
    --keep) keep=1; shift ;;
    -R) select=(-R "$2"); shift 2 ;;
    -j) jobs=$2; shift 2 ;;
    -h | --help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "profile.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
command -v perf >/dev/null || { echo "profile.sh: needs perf (apt install linux-perf)" >&2; exit 2; }
perf stat -e sched:sched_process_exec -- true 2>/dev/null >&2 ||
  { echo "profile.sh: perf cannot read the scheduler tracepoints (run as root, or sysctl kernel.perf_event_paranoid=0)" >&2; exit 2; }
source "$root/jobs/python-env.sh"   # python3: meridian's environment

((keep)) || rm -rf "$build"
mkdir -p "$build"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
start=$(date +%s.%N)
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release >"$build/profile.configure.log" 2>&1 ||
  { cat "$build/profile.configure.log"; exit 1; }
configured=$(date +%s.%N)
cmake --build "$build" -j "$(nproc)" >"$build/profile.build.log" 2>&1 || { tail -50 "$build/profile.build.log"; exit 1; }
built=$(date +%s.%N)

# Every test command runs under perf stat: the CTestTestfile that CMake wrote gets the wrapper in front
# of each command (ctest has no launcher property before CMake 3.29). Reconfiguring undoes it.
perfdir=$build/profile
rm -rf "$perfdir" && mkdir -p "$perfdir"
find "$build" -name CTestTestfile.cmake -exec sed -i -E \
  "s|^add_test\(([A-Za-z0-9_.-]+) |add_test(\1 \"$root/tests/tools/profile_test.sh\" \"$perfdir\" \"\1\" |" {} +
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tested=$(date +%s.%N)
status=0
(cd "$build" && ctest --output-on-failure -j "$jobs" --timeout 900 "${select[@]}") >"$build/profile.ctest.log" 2>&1 || status=$?
done_at=$(date +%s.%N)
tail -5 "$build/profile.ctest.log"
python3 "$root/tests/tools/profile_report.py" --build "$build" --perf "$perfdir" \
  --configure "$(awk "BEGIN {print $configured - $start}")" --build-s "$(awk "BEGIN {print $built - $configured}")" \
  --ctest-s "$(awk "BEGIN {print $done_at - $tested}")" --ctest-log "$build/profile.ctest.log"
exit "$status"
