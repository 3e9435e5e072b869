#!/usr/bin/env bash
# Usage: format_check.sh SOURCE_DIR — every C++ file git tracks is formatted as the repository's
# .clang-format says (Debian's clang-format, installed by jobs/setup-node.sh). Fails listing the files
# that differ; `clang-format -i FILE` fixes one. One clang-format process for all files (one per file
# took 27 s alone and about a minute beside the suite's other tests, mostly start-up).
set -u
src=$1
command -v clang-format >/dev/null || { echo "FAIL: clang-format is not installed (jobs/setup-node.sh installs it)"; exit 1; }
cd "$src" || exit 1
mapfile -t files < <(git ls-files '*.cpp' '*.h')
(( ${#files[@]} > 0 )) || { echo "FAIL: no C++ files found under $src (not a git checkout?)"; exit 1; }
out=$(clang-format --dry-run --Werror "${files[@]}" 2>&1)
rc=$?
# Each violation is "FILE:LINE:COL: error: code should be clang-formatted ...".
mapfile -t bad < <(sed -n 's/^\([^ :]*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' <<<"$out" | uniq)
if ((rc != 0 || ${#bad[@]} > 0)); then
  if ((${#bad[@]} == 0)); then
    echo "FAIL: clang-format exited $rc:"
    head -20 <<<"$out"
    exit 1
  fi
  echo "FAIL: ${#bad[@]} of ${#files[@]} files are not clang-formatted (run: clang-format -i FILE):"
  printf '  %s\n' "${bad[@]}"
  grep -m1 -A2 "^${bad[0]}:" <<<"$out"
  exit 1
fi
echo "PASS: ${#files[@]} files formatted"
