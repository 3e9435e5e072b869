#!/usr/bin/env bash
# Usage: train_cluster_test.sh MERIDIAN SOURCE_DIR MODE — training across 3 virtual nodes
# (tests/cluster/vcluster.sh: network namespaces, TCP only, links at 1 Gbit/s), one rank each.
# MODE:
#   equal       3 nodes, 6 steps, then resumed to 12, equal bit for bit (/model and /optim) to 12
#               straight steps of 3 ranks on one host: the same ranks, the same reduction order
#               (Open MPI picks its allreduce algorithm by size and rank count, not by transport)
#               and one intra-op thread per rank in both runs.
#   kill-step   every process of node 3 killed (SIGKILL) in the middle of a step, and the node
#               unreachable from then on (a VM that died);
#   kill-ckpt   the same while a checkpoint is being written (its .tmp file exists);
#   partition   node 3's link set down in the middle of a step; brought back up after the job ended.
#   data-cut    node 3's data interface (eth0) down for 40 s in the middle of a step while the launcher's
#               agent still reaches it (a separate management network), --comm-timeout 10: the probe
#               after the first pause of the default backoff (10 s) finds eth0 down and leaves node 3
#               out; the link comes back during the resumed run.
#   plain       the partition under a plain `mpirun` (no restart script), --comm-timeout 10 and
#               MERIDIAN_LAUNCHER_GRACE_S=10: mpirun itself must return, with a non-zero exit, within
#               10 + 10 + 30 s of the fault, meridian's message that it ended mpirun on its output.
# In the other fault modes the run goes through jobs/mpirun-restart.sh with --comm-timeout 10. Checked:
# every process of the failed attempt on the surviving nodes (ranks, orted, mpirun) ends within
# comm-timeout + 30 s of the fault; the restart leaves node 3 out (its probe fails) and the run
# finishes on 2 nodes through the elastic resume from the last complete checkpoint, which verifies;
# afterwards no process is left on any node (on node 3 after its link is back, for the partition).
# Prints the time from the fault to the end of the failed attempt and to the first resumed step.
# Exit 77 (skipped) when not root or network namespaces cannot be made.
set -u
meridian=$(realpath "$1") src=$(realpath "$2") mode=$3
restart=$src/jobs/mpirun-restart.sh
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/cluster/vcluster.sh
source "$here/vcluster.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
case $mode in
  equal) id=205 ;;
  kill-step) id=206 ;;
  kill-ckpt) id=207 ;;
  partition) id=208 ;;
  data-cut) id=212 VC_MGMT=1 ;;
  plain) id=213 ;;
  *) echo "unknown mode '$mode'"; exit 1 ;;
esac
fail() {
  echo "FAIL ($mode): $*"
  for f in "$VC_DIR"/*.out "$VC_DIR"/restarts.log; do [[ -f $f ]] && { echo "----- $f (last 30 lines)"; tail -30 "$f"; }; done
  exit 1
}
vc_up "$id" 3 1gbit
vc_mpirun_cmd
tmp=$VC_DIR
mpirun=mpirun
# shellcheck source=tests/ckpt/fixture.sh
source "$src/tests/ckpt/fixture.sh"
steps=$([[ $mode == equal ]] && echo 12 || echo 30)
make_fixture "train: {batch: 8, steps: $steps, log_every: 1}
checkpoint: {every_steps: $([[ $mode == equal ]] && echo 6 || echo 5), keep_last: 10}"
train_args=(train --config "$tmp/small.yaml" --data "$tmp/data.h5")

if [[ $mode == equal ]]; then
  # One intra-op thread everywhere: a node's rank would take both cores (2 threads) where 3 ranks on
  # one host take one each, and the thread count changes the order of a kernel's float sums.
  export OMP_NUM_THREADS=1
  VC_MPIRUN+=(-x OMP_NUM_THREADS)
  mpirun --oversubscribe --bind-to none -np 3 "$meridian" "${train_args[@]}" --run-dir "$tmp/host" >"$tmp/host.out" 2>&1 ||
    fail "the one-host run exited $?"
  vc_exec 1 "${VC_MPIRUN[@]}" -np 3 "$meridian" "${train_args[@]}" --run-dir "$tmp/nodes" --set train.stop_at=6 \
    >"$tmp/nodes.out" 2>&1 || fail "the 3-node run exited $?"
  vc_exec 1 "${VC_MPIRUN[@]}" -np 3 "$meridian" "${train_args[@]}" --run-dir "$tmp/nodes" --resume auto \
    >"$tmp/resumed.out" 2>&1 || fail "the resumed 3-node run exited $?"
  grep -q "resumed from .*step_00000006" "$tmp/resumed.out" || fail "the second run did not resume from step 6"
  grep -q "3 ranks (3 nodes)" "$tmp/nodes.out" || fail "the run does not report 3 nodes"
  for group in /model /optim; do
    h5diff -r "$tmp/host/checkpoints/step_00000012.h5" "$tmp/nodes/checkpoints/step_00000012.h5" $group $group >"$tmp/diff" ||
      { grep -v "^0 differences found" "$tmp/diff" | grep -B3 -A3 "differences found\|not comparable" | head -20; fail "$group after 6 + 6 steps on 3 nodes differs from 12 steps on one host"; }
  done
  echo "3 nodes (6 steps, resumed, 6 more) equal 3 ranks on one host (12 steps), bit for bit"
  echo PASS
  exit 0
fi

# ---- Faults ---------------------------------------------------------------------------------------
fault_step=${FAULT_STEP:-$((8 + RANDOM % 7))}  # 8..14 (or $FAULT_STEP), of 30; checkpoints every 5 steps
now() { date +%s.%N; }
# Waits (up to 180 s) until `test` succeeds; 1 when it never did.
wait_for() {
  for _ in $(seq 1 3600); do eval "$1" && return 0; sleep 0.05; done
  return 1
}
(
  if [[ $mode == kill-ckpt ]]; then
    # The first checkpoint written after the fault step, while its .tmp file exists.
    wait_for "grep -q 'step  *$fault_step/$steps' '$tmp/run.out' 2>/dev/null" || exit 0
    wait_for "compgen -G '$tmp/run/checkpoints/*.h5.tmp' >/dev/null" || exit 0
  else
    wait_for "grep -q 'step  *$fault_step/$steps' '$tmp/run.out' 2>/dev/null" || exit 0
  fi
  case $mode in
    kill-*) vc_kill_node 3; vc_link 3 down ;;
    partition | plain) vc_link 3 down ;;
    data-cut) vc_link 3 down; (sleep 40; vc_link 3 up; now >"$tmp/link_back_at") & ;;
  esac
  now >"$tmp/fault_at"
  compgen -G "$tmp/run/checkpoints/*.h5.tmp" >"$tmp/tmp_at_fault"
) &
injector=$!
# What happened when (for the figures): the failed attempt's end, the first resumed step.
(
  wait_for "[[ -f '$tmp/fault_at' ]]" || exit 0
  wait_for "grep -q 'attempt 1: exit code' '$tmp/restarts.log' 2>/dev/null" && now >"$tmp/ended_at"
  wait_for "awk '/resumed from/{r=1} r && /step +[0-9]+\\/$steps/{f=1} END{exit !f}' '$tmp/run.out' 2>/dev/null" &&
    now >"$tmp/resumed_at"
) &
monitor=$!
comm_timeout=10
if [[ $mode == plain ]]; then
  export MERIDIAN_LAUNCHER_GRACE_S=10
  vc_exec 1 "${VC_MPIRUN[@]}" -x MERIDIAN_LAUNCHER_GRACE_S -np 3 "$meridian" "${train_args[@]}" --comm-timeout 10 \
    --run-dir "$tmp/run" >>"$tmp/run.out" 2>&1  # appended: the watcher appends its message too
  rc=$?
  now >"$tmp/ended_at"
  kill $monitor 2>/dev/null
  wait $injector
  [[ -f $tmp/fault_at ]] || fail "the fault was never injected"
  ((rc != 0)) || fail "mpirun exited 0 after a partition"
  to_end=$(awk "BEGIN{print $(cat "$tmp/ended_at") - $(cat "$tmp/fault_at")}")
  awk "BEGIN{exit !($to_end < 50)}" || fail "mpirun returned $to_end s after the fault (more than 10 + 10 + 30 s)"
  grep -q "watchdog: .* did not complete within 10 s" "$tmp/run.out" || fail "no watchdog message"
  grep -q "meridian: mpirun (pid [0-9]*) was still running 10 s after rank [0-9] ended the job .*: killing it" "$tmp/run.out" ||
    fail "no message from meridian's launcher watcher"
  node3_left=$(vc_pids 3 | wc -w)
  vc_link 3 up
  for _ in $(seq 1 120); do [[ -z $(vc_pids) ]] && break; sleep 0.5; done
  left=$(vc_pids)
  [[ -z $left ]] || { ps -o pid,args -p $left; fail "processes left on the nodes after the job"; }
  printf 'plain mpirun, partition at step %d: mpirun returned (exit %d) %.1f s after the fault; %d process(es) left on the cut node before its link came back, none after\n' \
    "$fault_step" "$rc" "$to_end" "$node3_left"
  echo PASS
  exit 0
fi
backoff=(--backoff 1)
[[ $mode == data-cut ]] && backoff=()  # the default pauses (10, 30, 60 s)
vc_exec 1 bash "$restart" --max-restarts 2 "${backoff[@]}" --log "$tmp/restarts.log" -- \
  "${VC_MPIRUN[@]}" -np 3 "$meridian" "${train_args[@]}" --comm-timeout $comm_timeout --run-dir "$tmp/run" >"$tmp/run.out" 2>&1
rc=$?
wait $injector $monitor
cat "$tmp/restarts.log"
[[ -f $tmp/fault_at ]] || fail "the fault was never injected"
((rc == 0)) || fail "the restarted run exited $rc"
if [[ $mode == kill-ckpt ]]; then
  [[ -s $tmp/tmp_at_fault ]] || fail "the checkpoint write had ended before the node was killed (no .tmp left)"
  echo "killed while writing $(cat "$tmp/tmp_at_fault")"
fi
grep -q "attempt 2: .*--resume auto" "$tmp/restarts.log" || fail "no second attempt with --resume auto"
if [[ $mode == data-cut ]]; then
  grep -q "host $(vc_node 3): no interface that btl_tcp_if_include=eth0 names is up" "$tmp/restarts.log" ||
    fail "the restart did not leave node 3 out for its data interface"
else
  grep -q "host $(vc_node 3) does not answer" "$tmp/restarts.log" || fail "the restart did not leave node 3 out"
fi
grep -q "ranks: 3 -> 2" "$tmp/restarts.log" || fail "the second attempt does not run 2 ranks"
grep -q "resumed from" "$tmp/run.out" || fail "the second attempt did not resume"
resumed_from=$(grep -m1 -oE "resumed from [^ ]*step_[0-9]+\.h5" "$tmp/run.out" | grep -oE "[^ ]*step_[0-9]+\.h5")
"$meridian" inspect "$resumed_from" >/dev/null 2>&1 || fail "the checkpoint resumed from ($resumed_from) does not verify"
"$meridian" inspect "$tmp/run/checkpoints/step_000000$steps.h5" >/dev/null 2>&1 || fail "the final checkpoint does not verify"
fault=$(cat "$tmp/fault_at") ended=$(cat "$tmp/ended_at" 2>/dev/null) resumed=$(cat "$tmp/resumed_at" 2>/dev/null)
[[ -n $ended && -n $resumed ]] || fail "the failed attempt's end or the resumed step was not seen"
to_end=$(awk "BEGIN{print $ended - $fault}") to_resume=$(awk "BEGIN{print $resumed - $fault}")
awk "BEGIN{exit !($to_end < $comm_timeout + 30)}" ||
  fail "the failed attempt ended $to_end s after the fault (more than comm-timeout $comm_timeout + 30 s)"

if [[ $mode == data-cut ]]; then
  wait_for "[[ -f '$tmp/link_back_at' ]]" || fail "the link never came back"
  for _ in $(seq 1 120); do [[ -z $(vc_pids 3) ]] && break; sleep 0.5; done
elif [[ $mode == partition ]]; then
  vc_link 3 up
  for _ in $(seq 1 120); do [[ -z $(vc_pids 3) ]] && break; sleep 0.5; done
fi
left=$(vc_pids)
if [[ -n $left ]]; then
  ps -o pid,args -p $left
  fail "processes left on the nodes after the job"
fi
printf '%s at step %d: the failed attempt ended %.1f s after the fault; training resumed (first step on 2 nodes) %.1f s after it; nothing left on any node\n' \
  "$mode" "$fault_step" "$to_end" "$to_resume"
echo PASS
