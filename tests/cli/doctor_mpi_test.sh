#!/usr/bin/env bash
# Usage: doctor_mpi_test.sh MPIRUN MERIDIAN [WITH_DATA [MODE]] — `meridian doctor` end to end, 4 ranks.
# MODE speed (its verdicts measure speeds and CPU use: run alone):
#  (a) a healthy job: the report with its OK lines, a hint under every WARN/FAIL, exit 0 on every rank;
#  (c) rank 1 made slow with the test hook --inject-delay: a WARN naming rank 1 and no other rank;
#  (e) a busy process beside the job: the cpu check WARNs, naming it (its pid and command).
# MODE faults (beside other tests):
#  --help and a bad --inject-delay;
#  (b) ranks that see different datasets (an MPMD launch: ranks 0-1 get one file, ranks 2-3 another;
#      then ranks 2-3 a missing one): a FAIL naming ranks 2-3, exit 1 on every rank;
#  (d) a pair that never answers within --comm-timeout: exit 3 with a message naming the pair, no hang.
# MODE all (the default): both.
set -u
mpirun=$1 meridian=$2 with_data=${3:-ON} mode=${4:-all}
[[ $mode == speed || $mode == faults || $mode == all ]] || { echo "unknown mode '$mode' (speed, faults or all)"; exit 1; }
speed() { [[ $mode != faults ]]; }
faults() { [[ $mode != speed ]]; }
# shellcheck source=tests/mpi_script_lib.sh
source "$(dirname "$0")/../mpi_script_lib.sh"

# Each rank records meridian's exit code and exits 0 itself, so that mpirun does not kill the ranks
# still finishing when the first one exits non-zero: the test sees every rank's code.
cat >"$tmp/rank.sh" <<EOF
#!/usr/bin/env bash
"$meridian" "\$@"
echo \$? >"$tmp/rc.\$OMPI_COMM_WORLD_RANK"
EOF
chmod +x "$tmp/rank.sh"
# run ARGS...: mpirun ARGS (ranks started through rank.sh), output in $tmp/o (and shown).
run() {
  rm -f "$tmp"/rc.*
  "$mpirun" --oversubscribe "$@" >"$tmp/o" 2>&1 || { cat "$tmp/o"; fail "mpirun $* exited $?"; }
  cat "$tmp/o"
}
# every_rank_exited CODE WHAT: meridian exited CODE on all 4 ranks.
every_rank_exited() {
  for r in 0 1 2 3; do
    [[ -f $tmp/rc.$r && $(cat "$tmp/rc.$r") == "$1" ]] || fail "$2: rank $r exited $(cat "$tmp/rc.$r" 2>/dev/null || echo '?'), expected $1"
  done
}
# Every WARN and FAIL line is followed by its hint.
hints_present() {
  awk '/^(WARN|FAIL) /{want=1; line=$0; next} want && !/^ +hint: /{print "no hint after: " line; bad=1} {want=0}
       END{if (want) {print "no hint after: " line; bad=1} exit bad}' "$tmp/o" || fail "$1: a WARN/FAIL without a hint"
}

if faults; then
help=$("$meridian" doctor --help) || fail "doctor --help exited $?"
grep -qF -- "--data" <<<"$help" || fail "doctor --help lacks --data"
grep -qF -- "--inject-delay" <<<"$help" && fail "doctor --help shows the test hook --inject-delay"
"$meridian" doctor --inject-delay 1:fast >"$tmp/o" 2>&1; rc=$?
[[ $rc -eq 2 ]] && grep -q "expected RANK:MICROSECONDS" "$tmp/o" || { cat "$tmp/o"; fail "bad --inject-delay: exit $rc"; }
fi

data=()
if [[ $with_data == ON ]]; then
  seeds=1
  faults && seeds="1 2"  # (b) compares two datasets
  for seed in $seeds; do
    "$mpirun" --oversubscribe -np 2 "$meridian" prep synthetic --count 16 --size 32 --vocab-size 300 \
      --context-length 16 --seed $seed --out "$tmp/d$seed.h5" >"$tmp/o" 2>&1 || { cat "$tmp/o"; fail "prep --seed $seed"; }
  done
  data=(--data "$tmp/d1.h5")
fi

if speed; then
# (a) Healthy: every section, the checks that cannot be wrong here are OK, every rank exits 0.
run -np 4 "$tmp/rank.sh" doctor --run-dir "$tmp/run" --iters 5 "${data[@]}"
every_rank_exited 0 "(a)"
grep -qF "meridian doctor: 4 rank(s) on 1 node(s)" "$tmp/o" || fail "(a) no report header"
for check in cores cpu memory disk shm gpus build binary libtorch mpi nccl cuda "shared dir" environment p2p allreduce clock; do
  grep -qE "^(OK|WARN|FAIL) +$check " "$tmp/o" || fail "(a) no '$check' line"
done
for check in build binary libtorch mpi nccl cuda "shared dir" allreduce clock; do
  grep -qE "^OK +$check " "$tmp/o" || fail "(a) '$check' is not OK"
done
grep -qE "^OK +shared dir +$tmp/run: every rank sees" "$tmp/o" || fail "(a) the run dir checked is not --run-dir"
[[ $(grep -cE "^(OK|WARN) +p2p +.* r[0-3] <-> .* r[0-3]: latency [0-9.]+ us, bandwidth [0-9.]+ GB/s" "$tmp/o") -eq 6 ]] ||
  fail "(a) expected the 6 pairs of 4 ranks on one node"
grep -qE "^OK +allreduce +4 ranks, mpi, 32 MiB float32: busbw [0-9.]+ GB/s" "$tmp/o" || fail "(a) allreduce line"
grep -qE "^doctor: [0-9]+ OK, [0-9]+ WARN, 0 FAIL$" "$tmp/o" || fail "(a) summary line"
if [[ $with_data == ON ]]; then
  grep -qE "^OK +data +$tmp/d1.h5: image_text 16 sample\(s\), .* on all 4 ranks$" "$tmp/o" || fail "(a) data line"
fi
hints_present "(a)"
grep -qE "^WARN +slow rank" "$tmp/o" && echo "note: (a) found a slow rank without injection (a busy machine?)"
fi

# (b) A dataset mismatch between ranks: FAIL naming the ranks that differ, exit 1 everywhere.
if [[ $with_data == ON ]] && faults; then
  run -np 2 "$tmp/rank.sh" doctor --run-dir "$tmp/run" --iters 2 --data "$tmp/d1.h5" \
    : -np 2 "$tmp/rank.sh" doctor --run-dir "$tmp/run" --iters 2 --data "$tmp/d2.h5"
  every_rank_exited 1 "(b)"
  grep -qE "^FAIL +data +ranks 2-3 \(.+\) see a different dataset than ranks 0-1 \(.+\): $tmp/d2.h5: .* vs $tmp/d1.h5: .*\(differs in created_by, bytes, first MiB\)$" \
    "$tmp/o" || fail "(b) no FAIL naming ranks 2-3 and what differs"
  grep -qF "hint: every rank must read the same dataset: a data path that points elsewhere on one node" "$tmp/o" ||
    fail "(b) no data hint"
  grep -qE "^doctor: [0-9]+ OK, [0-9]+ WARN, 1 FAIL$" "$tmp/o" || fail "(b) summary should count 1 FAIL"
  hints_present "(b)"

  # As a user runs it (no wrapper): mpirun itself exits 1.
  "$mpirun" --oversubscribe -np 2 "$meridian" doctor --run-dir "$tmp/run" --iters 2 --data "$tmp/d1.h5" \
    : -np 2 "$meridian" doctor --run-dir "$tmp/run" --iters 2 --data "$tmp/missing.h5" >"$tmp/o" 2>&1; rc=$?
  cat "$tmp/o"
  [[ $rc -eq 1 ]] || fail "(b) missing dataset on ranks 2-3: mpirun exited $rc, expected 1"
  grep -qE "^FAIL +data +ranks 2-3 \(.+\): .*missing.h5" "$tmp/o" || fail "(b) no FAIL naming ranks 2-3 and the missing file"
elif faults; then
  echo "SKIPPED (b): this build has no data area (-DMERIDIAN_WITH_DATA=OFF), so no --data check to test"
fi

if speed; then
# (c) Rank 1 sleeps 30 ms before each message it sends: far beyond a busy machine's scheduling noise.
run -np 4 "$tmp/rank.sh" doctor --run-dir "$tmp/run" --iters 5 --inject-delay 1:30000
every_rank_exited 0 "(c) a WARN, not a FAIL:"
grep -qE "^WARN +slow rank +rank 1 \(.+\): its 3 link\(s\) reach" "$tmp/o" || fail "(c) no WARN naming rank 1 as slow"
grep -qE "^WARN +slow rank +rank [023] " "$tmp/o" && fail "(c) a rank other than 1 named slow"
hints_present "(c)"
fi

if faults; then
# (d) Rank 1 sleeps 3 s per message with a 2 s timeout: doctor's watchdog ends the job, naming the pair.
timeout 60 "$mpirun" --oversubscribe -np 2 "$meridian" doctor --run-dir "$tmp/run" --iters 1 --comm-timeout 2 \
  --inject-delay 1:3000000 >"$tmp/o" 2>&1; rc=$?
cat "$tmp/o"
[[ $rc -eq 3 ]] || fail "(d) unanswered ping-pong: exit $rc, expected 3 (124: doctor hung)"
grep -qE "doctor: ping-pong between rank 0 \(.+\) and rank 1 \(.+\) did not complete within 2 s" "$tmp/o" ||
  fail "(d) no message naming the pair that did not answer"
fi
if speed; then
# (e) Another process keeps a core busy: named with its pid, the job's own ranks are not.
sh -c 'while :; do :; done' &
busy=$!
run -np 2 "$tmp/rank.sh" doctor --run-dir "$tmp/run" --iters 2
kill $busy
wait $busy 2>/dev/null
grep -qE "^WARN +cpu +.*other processes (0\.[5-9]|1\.[0-9]) cores busy: CPU shared with .*pid $busy \(sh\) [0-9.]+ cores" "$tmp/o" ||
  fail "(e) the busy process (pid $busy) is not named in a cpu WARN"
grep -E "^WARN +cpu " "$tmp/o" | grep -qE "\(meridian\)" && fail "(e) the job's own ranks named as other processes"
hints_present "(e)"
fi
echo "doctor_mpi_test ($mode): PASS"
