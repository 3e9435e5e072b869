#!/usr/bin/env bash
# Usage: train_cluster_test.sh MERIDIAN SOURCE_DIR MODE — training across 3 virtual nodes
# (tests/cluster/vcluster.sh: network namespaces, TCP only, links at 1 Gbit/s), one rank each.
# MODE:
#   equal       3 nodes, 6 steps, then resumed to 12, equal bit for bit (/model and /optim) to 12
#               straight steps of 3 ranks on one host: the same ranks, the same reduction order
#               (Open MPI picks its allreduce algorithm by size and rank count, not by transport)
#               and one intra-op thread per rank in both runs.
#   kill-step   every process of node 3 killed (SIGKILL) in the middle of a step, and the node
#               unreachable from then on (a VM that died): the restart script probes it every 2 s
#               (--rejoin-every 2) and never tries to grow back;
#   kill-ckpt   the same while a checkpoint is being written (its .tmp file exists);
#   partition   node 3's link set down in the middle of a step; brought back up after the job ended.
#   data-cut    node 3's data interface (eth0) down for 40 s in the middle of a step while the launcher's
#               agent still reaches it (a separate management network), --comm-timeout 10: the probe
#               after the first pause of the default backoff (10 s) finds eth0 down and leaves node 3
#               out; the link comes back during the resumed run, and the run grows back (--rejoin-every
#               3): node 3 passes two probes, the 2-node attempt checkpoints on SIGUSR1 and the third
#               attempt runs on 3 nodes from that checkpoint, nothing lost. Checked too: the sample
#               record (every sample of every epoch once), the attempts in attempts.jsonl and the
#               report's grow-back; printed: the throughput before, during and after, and the time
#               from the link's return to the first 3-node step.
#   flap        node 3's link cut 3 times for 20 s, 20 s apart (--rejoin-every 3, --flap-window 60):
#               it rejoins, is lost again within the flap window, and is then held out for 60 s of
#               passing probes: at most 2 grow-backs and 3 failed attempts, and the run finishes with
#               an exact sample record.
#   plain       the partition under a plain `mpirun` (no restart script), --comm-timeout 10 and
#               MERIDIAN_LAUNCHER_GRACE_S=10: mpirun itself must return, with a non-zero exit, within
#               10 + 10 + 30 s of the fault, meridian's message that it ended mpirun on its output.
# In the other fault modes the run goes through jobs/mpirun-restart.sh with --comm-timeout 10. Checked:
# every process of the failed attempt on the surviving nodes (ranks, orted, mpirun) ends within
# comm-timeout + 30 s of the fault; the restart leaves node 3 out (its probe fails) and the run
# finishes on 2 nodes through the elastic resume from the last complete checkpoint, which verifies;
# afterwards no process is left on any node (on node 3 after its link is back, for the partition).
# Prints the time from the fault to the end of the failed attempt and to the first resumed step.
# NODE_QUOTA_US=N (by hand, for data-cut's throughput figures): every node's processes in a CPU cgroup
# of their own with N us per 10 ms (cgroup v1 cpu.cfs_quota_us; 6000: 0.6 of a core, 1.8 for 3 nodes
# on 2 cores), so that a node's speed is its own and the run's throughput follows the node count, as
# on real nodes; without it the nodes share this machine's cores and 2 nodes run faster than 3.
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
  flap) id=217 ;;
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
cg=
quota_down() {  # the nodes' CPU groups (NODE_QUOTA_US), then the cluster
  local k
  for k in 1 2 3; do
    [[ -d $cg/n$k ]] || continue
    while read -r t; do echo "$t" >"$cg/tasks"; done <"$cg/n$k/tasks" 2>/dev/null
    rmdir "$cg/n$k" 2>/dev/null
  done
  [[ -n $cg ]] && umount "$cg" 2>/dev/null
  vc_down
}
if [[ -n ${NODE_QUOTA_US:-} ]]; then
  cg=$tmp/cpu
  mkdir -p "$cg" && mount -t cgroup -o cpu cgroup "$cg" || fail "cannot mount the cgroup-v1 cpu controller"
  trap quota_down EXIT
  for k in 1 2 3; do
    mkdir -p "$cg/n$k" && echo 10000 >"$cg/n$k/cpu.cfs_period_us" && echo "$NODE_QUOTA_US" >"$cg/n$k/cpu.cfs_quota_us" ||
      fail "cannot make the CPU group of node $k"
  done
  cat >"$tmp/in-quota" <<WRAP
#!/bin/bash
echo \$\$ >"$cg/n\$(hostname | sed 's/.*n//')/tasks" || exit 1
exec "$meridian" "\$@"
WRAP
  chmod +x "$tmp/in-quota"
fi
ranks_run=${cg:+$tmp/in-quota}
ranks_run=${ranks_run:-$meridian}
mpirun=mpirun
# shellcheck source=tests/ckpt/fixture.sh
source "$src/tests/ckpt/fixture.sh"
# The sample record in the fault modes: every sample of every epoch once across the attempts.
case $mode in
  equal) steps=12 every=6 record=false ;;
  data-cut) steps=${STEPS:-800} every=50 record=true ;;  # long enough to outlast the cut and the grow-back
  flap) steps=${STEPS:-1700} every=50 record=true ;;  # still running at the third cut (80 s after the first)
  *) steps=30 every=5 record=true ;;
esac
make_fixture "train: {batch: 8, steps: $steps, log_every: 1, record_samples: $record}
checkpoint: {every_steps: $every, keep_last: 10}"
train_args=(train --config "$tmp/small.yaml" --data "$tmp/data.h5")
# data-cut and flap in the suite: slow steps that cost little CPU (rank 0 sleeps 40 ms in each forward;
# the others wait for it), as the tests are about the restarts' timeline. By hand with NODE_QUOTA_US
# (data-cut's throughput figures): a model that computes more than it communicates instead, so that a
# step's time follows the nodes' CPU.
if [[ -n $cg && $mode == data-cut ]]; then
  train_args+=(--set model.vision.width=96 --set model.vision.depth=2 --set model.text.width=96 --set model.text.depth=2
    --set model.embed=96)
elif [[ $mode == data-cut || $mode == flap ]]; then
  train_args+=(--inject-straggler 0:compute:40 --set train.health_every=0)
fi

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
[[ $mode == data-cut || $mode == flap ]] && fault_step=${FAULT_STEP:-$((60 + RANDOM % 20))}  # past the checkpoint of step 50
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
    flap)  # down 20 s, up 20 s, three times
      (
        for k in 1 2 3; do
          vc_link 3 down; sleep 20
          vc_link 3 up; now >"$tmp/link_back_at.$k"
          ((k < 3)) && sleep 20
        done
      ) & ;;
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
[[ $mode == flap ]] && comm_timeout=5  # the failure seen within a cut of 20 s, so that the probe leaves the node out
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
options=(--max-restarts 2 --backoff 1)
case $mode in
  data-cut) options=(--max-restarts 2 --rejoin-every 3) ;;  # the default pauses (10, 30, 60 s)
  kill-step) options+=(--rejoin-every 2) ;;
  flap) options=(--max-restarts 3 --backoff 1 --abort-grace 5 --rejoin-every 3 --flap-window 60) ;;
esac
vc_exec 1 bash "$restart" "${options[@]}" --log "$tmp/restarts.log" -- \
  "${VC_MPIRUN[@]}" -np 3 "$ranks_run" "${train_args[@]}" --comm-timeout $comm_timeout --run-dir "$tmp/run" >"$tmp/run.out" 2>&1
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
# (The long runs keep their last 10 checkpoints: the first one resumed from may be gone.)
if [[ -f $resumed_from || ($mode != data-cut && $mode != flap) ]]; then
  "$meridian" inspect "$resumed_from" >/dev/null 2>&1 || fail "the checkpoint resumed from ($resumed_from) does not verify"
fi
"$meridian" inspect "$tmp/run/checkpoints/$(printf 'step_%08d.h5' "$steps")" >/dev/null 2>&1 ||
  fail "the final checkpoint does not verify"
# 128 samples, 3 x 8 per step: 5 steps per epoch of 120 rows.
python3 "$src/tests/tools/check_samples.py" "$tmp/run" 128 "$steps" 24 || fail "the sample record"
fault=$(cat "$tmp/fault_at") ended=$(cat "$tmp/ended_at" 2>/dev/null) resumed=$(cat "$tmp/resumed_at" 2>/dev/null)
[[ -n $ended && -n $resumed ]] || fail "the failed attempt's end or the resumed step was not seen"
to_end=$(awk "BEGIN{print $ended - $fault}") to_resume=$(awk "BEGIN{print $resumed - $fault}")
awk "BEGIN{exit !($to_end < $comm_timeout + 30)}" ||
  fail "the failed attempt ended $to_end s after the fault (more than comm-timeout $comm_timeout + 30 s)"

# Growing back: attempts (start records) and their world sizes, in order.
sizes=$(grep -o '"event":"start".*' "$tmp/run/attempts.jsonl" | grep -oE '"world_size":[0-9]+' | cut -d: -f2 | xargs)
grows=$(grep -c "stopped to grow back" "$tmp/restarts.log")
failures=$(grep -c "next attempt in" "$tmp/restarts.log")
echo "attempts' world sizes: $sizes; grow-backs $grows; failed attempts $failures"
case $mode in
  kill-step)
    grep -q "probing the left-out host(s) $(vc_node 3) every 2 s" "$tmp/restarts.log" || fail "node 3 was not probed to grow back"
    ((grows == 0)) || fail "a grow-back was tried for a node that never came back"
    [[ $sizes == "3 2" ]] || fail "attempts of $sizes ranks, expected 3 then 2" ;;
  data-cut)
    [[ $sizes == "3 2 3" ]] || fail "attempts of $sizes ranks, expected 3, 2, then 3 again"
    grep -q "attempt 3 grows back: $(vc_node 3) rejoin(s), 2 -> 3 ranks" "$tmp/restarts.log" || fail "no grow-back to 3 ranks"
    grep -q "$(vc_node 3) rejoined: first step at 3 ranks" "$tmp/restarts.log" || fail "no first-step figure for the grow-back"
    "$meridian" report "$tmp/run" >/dev/null 2>&1 || fail "meridian report exited $?"
    python3 - "$tmp" "$(vc_node 3)" <<'PY' || fail "the grow-back's figures"
import json, re, statistics, sys
tmp, node = sys.argv[1], sys.argv[2]
page = open(f"{tmp}/run/report.html").read()
report = json.loads(re.search(r'id="run-data">(.*?)</script>', page, re.S).group(1))
grown = [a for a in report["attempts"] if a.get("rejoined")]
assert len(grown) == 1 and grown[0]["rejoined"] == {"hosts": [node], "from": 2, "to": 3}, report["attempts"]
lost = grown[0].get("lost")
assert lost == 0, f"the grow-back lost {lost} step(s)"
starts = [a["start"]["time"] for a in report["attempts"]] + [float("inf")]
rows = [l.split(",") for l in open(f"{tmp}/run/metrics.csv").read().splitlines()[1:]]
rate = [(float(w), float(v)) for s, w, n, v in rows if n == "train/samples_per_s"]
first = [(float(w)) for s, w, n, v in rows if n == "train/loss" and float(w) >= starts[2]][0]
back = float(open(f"{tmp}/link_back_at").read())
median = []
for i in range(3):  # each attempt's median rate, its first 3 logged steps (start-up) left out
    r = [v for w, v in rate if starts[i] <= w < starts[i + 1]][3:]
    median.append(statistics.median(r))
print(f"throughput (samples/s, median per step): before the cut {median[0]:.1f} (3 nodes), during {median[1]:.1f} "
      f"(2 nodes), after the grow-back {median[2]:.1f} (3 nodes: {median[2] / median[0]:.2f} of before); "
      f"link back to the first 3-node step {first - back:.1f} s; steps lost at the grow-back: {lost}")
PY
    wait_for "[[ -f '$tmp/link_back_at' ]]" || fail "the link never came back"
    for _ in $(seq 1 120); do [[ -z $(vc_pids 3) ]] && break; sleep 0.5; done ;;
  flap)
    # Each cut fails at most the attempt that has node 3 in it (a cut during a relaunch is a launch
    # failure instead); after the first flap node 3 must hold 60 s of passes, so at most one more
    # grow-back: without the hold every return would be one.
    ((grows >= 1 && grows <= 2)) || fail "$grows grow-backs (expected 1, at most 2 with the hold)"
    ((failures <= 3)) || fail "$failures failed attempts for 3 cuts"
    grep -q "host $(vc_node 3) was lost again [0-9]* s after it rejoined (flap 1)" "$tmp/restarts.log" || fail "no flap noted"
    wait_for "[[ -f '$tmp/link_back_at.3' ]]" || fail "the link never came back"
    for _ in $(seq 1 120); do [[ -z $(vc_pids 3) ]] && break; sleep 0.5; done ;;
esac
if [[ $mode == partition ]]; then
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
