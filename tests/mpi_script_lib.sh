# Shared by the mpirun script tests (source it after setting mpirun= and meridian=): fail, a
# temporary directory removed on exit, and a small synthetic instruction set.
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prep_text() {  # prep_text OUT: 200 synthetic instruction records, written by 2 ranks
  "$mpirun" --oversubscribe -np 2 "$meridian" prep synthetic --kind text --count 200 --out "$1" --log-level warn \
    >/dev/null || fail "prep exited $?"
}
