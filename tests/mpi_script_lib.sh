# Shared by the mpirun script tests (source it after setting mpirun= and meridian=): fail, a
# temporary directory removed on exit, and a small synthetic instruction set.
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prep_text() {  # prep_text OUT: 200 synthetic instruction records, written by 2 ranks
  "$mpirun" --oversubscribe -np 2 "$meridian" prep synthetic --kind text --count 200 --out "$1" --log-level warn \
    >/dev/null || fail "prep exited $?"
}
# expect_error WHAT PATTERN COMMAND...: the command exits 2 and its output matches PATTERN.
expect_error() {  # expect_error WHAT PATTERN COMMAND...
  local what=$1 pattern=$2
  shift 2
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  [[ $rc == 2 ]] || { echo "$out" | tail -5; fail "$what: exit $rc, expected 2"; }
  grep -qE -- "$pattern" <<<"$out" || { echo "$out" | tail -5; fail "$what: the message does not match '$pattern'"; }
  echo "ok: $what: $(grep -m1 -E -- "$pattern" <<<"$out" | cut -c1-200)"
}
