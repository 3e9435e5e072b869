#!/usr/bin/env bash
# Usage: tests/flaky.sh N [REGEX] [--load] [--build DIR] — runs the timing-sensitive tests (ctest label
# `timing`; REGEX narrows them, as ctest -R) N times, one test at a time, and prints per test how many
# runs passed, with the mean and longest duration. --load runs them beside a busy loop pinned to core
# 0 (taskset), as another job on the node would be. Exit 0 when every run of every test passed.
# The build directory (default build/) must be built; as root, Open MPI's root variables are set here.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build regex= load=0 n=
while [[ $# -gt 0 ]]; do
  case $1 in
    --load) load=1; shift ;;
    --build) build=$2; shift 2 ;;
    -h | --help) sed -n '2,6p' "$0"; exit 0 ;;
    *) if [[ -z $n ]]; then n=$1; else regex=$1; fi; shift ;;
  esac
done
[[ $n =~ ^[1-9][0-9]*$ ]] || { echo "flaky.sh: N must be a positive number (usage: tests/flaky.sh N [REGEX] [--load])" >&2; exit 2; }
[[ -f $build/CTestTestfile.cmake ]] || { echo "flaky.sh: $build is not a configured build directory (--build DIR)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
select=(-L timing)
[[ -n $regex ]] && select+=(-R "$regex")
tests=$(cd "$build" && ctest -N "${select[@]}" | sed -n 's/^ *Test *#[0-9]*: //p')
[[ -n $tests ]] || { echo "flaky.sh: no test with label 'timing' matches '${regex}'" >&2; exit 2; }
busy=
if ((load)); then
  command -v taskset >/dev/null || { echo "flaky.sh: --load needs taskset (util-linux)" >&2; exit 2; }
  # The loop checks that this script is alive: killed with -9, it must not leave a core busy.
  taskset -c 0 sh -c "while kill -0 $$ 2>/dev/null; do :; done" &
  busy=$!
fi
log=$(mktemp /tmp/meridian-flaky.XXXXXX)
trap 'rm -f "$log.run"; [[ -n $busy ]] && kill "$busy" 2>/dev/null' EXIT
echo "flaky.sh: $(wc -w <<<"$tests") test(s), $n run(s) each, one at a time$( ((load)) && echo ", beside a busy loop on core 0"); log $log"
declare -A passed seconds longest
for t in $tests; do passed[$t]=0 seconds[$t]=0 longest[$t]=0; done
for ((i = 1; i <= n; i++)); do
  for t in $tests; do
    start=$(date +%s.%N)
    # -V: the whole output of every run is logged, and a test's "figures:" lines are printed.
    (cd "$build" && ctest -V -R "^${t}\$" --timeout 900) >"$log.run" 2>&1 && passed[$t]=$((passed[$t] + 1)) ||
      echo "run $i: $t FAILED (output in $log)"
    cat "$log.run" >>"$log"
    grep -o "figures: .*" "$log.run" | sed "s/^/run $i: $t: /"
    took=$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $start}")
    seconds[$t]=$(awk "BEGIN{print ${seconds[$t]} + $took}")
    longest[$t]=$(awk "BEGIN{print ($took > ${longest[$t]}) ? $took : ${longest[$t]}}")
  done
done
printf '\n| test | passed | mean s | longest s |\n|---|---|---|---|\n'
rc=0
for t in $tests; do
  printf '| %s | %d/%d | %.1f | %.1f |\n' "$t" "${passed[$t]}" "$n" "$(awk "BEGIN{print ${seconds[$t]} / $n}")" "${longest[$t]}"
  ((passed[$t] == n)) || rc=1
done
exit $rc
