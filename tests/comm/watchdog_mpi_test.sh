#!/usr/bin/env bash
# Usage: watchdog_mpi_test.sh MPIRUN HELPER skip|die
# Passes when the job ends with a non-zero status well inside the limit and (skip) the watchdog's
# message names the operation, bytes, rank, host and elapsed time.
set -u
mpirun=$1 helper=$2 mode=$3
start=$(date +%s)
out=$(timeout 100 "$mpirun" --oversubscribe -np 2 "$helper" "$mode" 2>&1)
rc=$?
elapsed=$(( $(date +%s) - start ))
echo "$out"
echo "--- exit status $rc after ${elapsed}s"
fail() { echo "FAIL: $*"; exit 1; }
[[ $rc -ne 0 ]] || fail "the job exited 0"
[[ $rc -ne 124 ]] || fail "the job hung until the test's 100 s limit"
[[ $elapsed -le 40 ]] || fail "the job took ${elapsed}s to end"
grep -q "unexpected" <<<"$out" && fail "a broken collective completed"
if [[ $mode == skip ]]; then
  grep -Eq "\[rank 1/2 @ [^]]+\] watchdog: allreduce\(sum\) of 4096 bytes .* did not complete within 2 s \(elapsed [0-9.]+ s\)" <<<"$out" \
    || fail "no watchdog message naming the operation, bytes, rank, host and time"
fi
echo PASS
