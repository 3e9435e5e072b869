# Shared by the mpirun script tests (source it after setting mpirun= and meridian=): fail, a
# temporary directory removed on exit, the suite's small synthetic datasets and expect_error.
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# synthetic NAME...: the suite's small synthetic datasets (tests/fixtures/synthetic_data.sh: text.h5,
# 200 instruction records; it.h5, 32 image-text pairs of 64 px; det.h5, 32 detection images of 64 px)
# in $tmp: copied from the ctest fixture's directory (MERIDIAN_TEST_DATA) when it has them, else made.
synthetic() {
  local name from
  for name in "$@"; do
    from=${MERIDIAN_TEST_DATA:-}
    if [[ -z $from || ! -f $from/$name ]]; then
      from=$tmp/synthetic
      [[ -f $from/$name ]] || bash "$(dirname "${BASH_SOURCE[0]}")/fixtures/synthetic_data.sh" "$mpirun" "$meridian" \
        "$from" >"$tmp/synthetic.log" 2>&1 || { cat "$tmp/synthetic.log"; fail "the synthetic datasets could not be made"; }
    fi
    cp "$from/$name" "$tmp/$name" || fail "cannot copy $from/$name"
  done
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
