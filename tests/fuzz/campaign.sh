#!/usr/bin/env bash
# A fuzzing campaign: each target of tests/fuzz/build.sh's build runs under libFuzzer for SECONDS,
# two at a time, from its seed corpus and regression cases, with the limits of issue 55: an input
# slower than 1 s is a hang, over 2 GB of memory an out-of-memory. New inputs go to OUT/<target>/corpus
# (the committed corpus is not changed). libFuzzer runs in fork mode, going on after a finding; each
# lands in OUT/<target>/ as crash-*, timeout-* or oom-* (add it to regressions/<target>/ with its fix).
# Fork mode keeps no child's report, so the sanitizers write theirs to OUT/<target>/asan.PID and
# ubsan.PID, and the harness its oracle's message (an escaped exception) to OUT/<target>/findings.log.
# Prints a table: executions, coverage (edges: libFuzzer's cov), features, seconds, CPU seconds (the
# fuzzer and its fork children), findings.
#
#   tests/fuzz/campaign.sh BUILD SECONDS OUT [TARGET...]     (no TARGET: every target)
set -uo pipefail
fz=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" && pwd) seconds=$2 out=$3
shift 3
mkdir -p "$out"
out=$(cd "$out" && pwd)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=($(ls "$build/fuzz" | sed -n 's/^fuzz_//p'))

dict_of() {  # the dictionary of a target's format
  case $1 in
    config_yaml | model_yaml | data_yaml) echo "$fz/dict/yaml.dict" ;;
    report_run | yolo_labels) echo "$fz/dict/csv.dict" ;;
    safetensors | hf_dir | coco_json | captions | text_records) echo "$fz/dict/json.dict" ;;
  esac
}

run() {
  local t=$1 dir=$out/$1
  mkdir -p "$dir/corpus"
  cp -r "$fz/corpus/$t/." "$dir/corpus/"
  [ -d "$fz/regressions/$t" ] && cp -r "$fz/regressions/$t/." "$dir/corpus/"
  local dict
  dict=$(dict_of "$t")
  # detect_leaks=0: LibTorch, OpenCV and HDF5 keep process-lifetime caches that LeakSanitizer reports
  # at every exit (not per input); meridian's own objects are RAII.
  ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1:log_path=$dir/asan \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:log_path=$dir/ubsan MERIDIAN_FUZZ_LOG=$dir/findings.log \
    OMP_NUM_THREADS=1 /usr/bin/time -o "$dir/cpu" -f '%U %S' "$build/fuzz/fuzz_$t" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
    -max_total_time="$seconds" -timeout=1 -rss_limit_mb=2048 -malloc_limit_mb=2048 -artifact_prefix="$dir/" \
    ${dict:+-dict=$dict} "$dir/corpus" >"$dir/log" 2>&1
  echo "$t exit $?"
}
export -f run dict_of
export fz build seconds out
printf '%s\n' "${targets[@]}" | xargs -P 2 -I{} bash -c 'run {}'

printf '| target | executions | edges (cov) | features | seconds | CPU s | findings |\n|---|---:|---:|---:|---:|---:|---|\n'
for t in "${targets[@]}"; do
  log=$out/$t/log
  last=$(grep -aE '^#[0-9]+: cov:' "$log" | tail -1)  # fork mode: "#N: cov: C ft: F corp: ... time: Ts"
  execs=$(sed -n 's/^#\([0-9]*\):.*/\1/p' <<<"$last")
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  secs=$(sed -n 's/.* time: \([0-9]*\)s.*/\1/p' <<<"$last")
  cpu=$(awk 'END {printf "%.0f", $1 + $2}' "$out/$t/cpu" 2>/dev/null)  # user + system, fork children included
  findings=$(cd "$out/$t" && ls crash-* timeout-* oom-* leak-* 2>/dev/null | wc -l)
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$t" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${secs:-?}" "${cpu:-?}" "$findings"
done
