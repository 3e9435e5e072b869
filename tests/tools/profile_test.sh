#!/usr/bin/env bash
# Usage: profile_test.sh PERF_DIR TEST_NAME COMMAND [ARGS...] — runs one test's command under perf stat
# for tests/profile.sh: CPU time of every process it starts (inherited counters), forks and execs, and
# the CPU time per 250 ms interval (PERF_DIR/TEST_NAME.perf), plus the wall time (TEST_NAME.wall).
# The command's exit status is the test's.
set -uo pipefail
dir=$1 name=$2
shift 2
start=$(date +%s.%N)
# perf stat -I exits 0 whatever the command did: the command's status goes through a file.
perf stat -I 250 -x, -e task-clock,sched:sched_process_fork,sched:sched_process_exec -o "$dir/$name.perf" -- \
  bash -c '"$@"; echo $? >"$0"' "$dir/$name.status" "$@"
status=$(cat "$dir/$name.status" 2>/dev/null || echo 1)
echo "$start $(date +%s.%N) $status" >"$dir/$name.wall"
exit "$status"
