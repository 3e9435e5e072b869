#!/usr/bin/env bash
# Usage: format_check.sh SOURCE_DIR — every C++ file git tracks is formatted as the repository's
# .clang-format says (Debian's clang-format, installed by jobs/setup-node.sh). Fails listing the files
# that differ; `clang-format -i FILE` fixes one.
set -u
src=$1
command -v clang-format >/dev/null || { echo "FAIL: clang-format is not installed (jobs/setup-node.sh installs it)"; exit 1; }
cd "$src" || exit 1
mapfile -t files < <(git ls-files '*.cpp' '*.h')
(( ${#files[@]} > 0 )) || { echo "FAIL: no C++ files found under $src (not a git checkout?)"; exit 1; }
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if (( ${#bad[@]} > 0 )); then
  echo "FAIL: ${#bad[@]} of ${#files[@]} files are not clang-formatted (run: clang-format -i FILE):"
  printf '  %s\n' "${bad[@]}"
  clang-format --dry-run "${bad[0]}" 2>&1 | head -20
  exit 1
fi
echo "PASS: ${#files[@]} files formatted"
