#!/usr/bin/env bash
# Usage: slurm_nodes_test.sh MERIDIAN SOURCE_DIR — the real jobs/slurm/train.sbatch on a real Slurm
# across 3 virtual nodes (tests/cluster/vcluster.sh: network namespaces c203n1..3, TCP only), and a
# node lost in the middle of the job.
#   One munged (its socket on the shared filesystem: a unix socket on a path reaches every
#   namespace), slurmctld on node 1, one slurmd per node (NodeAddr 198.18.203.K; %n in the slurmd
#   spool, pid and log paths keeps them apart on the shared filesystem), SlurmdTimeout=10,
#   ReturnToService=2, JobRequeue=1. Then, with LAUNCHER=srun (srun --mpi=pmix) and --nodes=2-3
#   (one task per node, srun's default; with --ntasks-per-node=1 sbatch fixes the task count at
#   2 x 1 and Slurm gives 2 nodes, not 3):
#  1. a healthy job on 3 nodes: exit 0, a rank on each of the 3 nodes, final checkpoint verifies;
#  2. the fault: 60 steps, a checkpoint every 5; after the first checkpoint and a later step, node 3
#     is killed (every process in it, its slurmd too: SIGKILL) and its link cut (a VM that died).
#     Expected: slurmctld marks c203n3 down (not responding), the job is requeued by Slurm
#     (--requeue, JobRequeue=1), starts again on the 2 remaining nodes, train.sbatch resumes
#     (--resume auto) from the newest checkpoint with the elastic "3 ranks -> 2" resume, and
#     finishes: COMPLETED, exit 0, final checkpoint verifies; nothing left in any namespace.
# Prints the time from the fault to the requeue and to the first resumed step. FAULT_STEP (7..10 by
# default) and COMM_TIMEOUT (meridian's --comm-timeout, 10 s) change the fault's moment and how soon
# the surviving ranks give up. Slurm requeues the job by itself only if it still runs when slurmctld
# sets the lost node DOWN (about 20 s after the fault here, with SlurmdTimeout=10; 300 s by default);
# with a shorter --comm-timeout the ranks end the job first (exit 3) and, before train.sbatch waited
# for Slurm's verdict (NODE_LOSS_WAIT), the job just ended FAILED. The default 10 s checks that
# path; COMM_TIMEOUT=30 lets Slurm requeue on its own. When the requeue does not happen the test
# fails with the evidence: the job's state and reason, its output, and the slurmctld log lines about
# the node and the job.
# Exit 77 (skipped) when not root, without slurm-wlm/munge, or without network namespaces.
set -u
meridian=$(realpath "$1") src=$(realpath "$2")
here=$(cd "$(dirname "$0")" && pwd)
export PATH=$PATH:/usr/sbin:/sbin
for tool in munged slurmctld slurmd sbatch srun scontrol scancel sinfo squeue; do
  command -v $tool >/dev/null || { echo "SKIPPED: $tool not found (apt-get install slurm-wlm munge); this test did NOT run"; exit 77; }
done
[[ $(id -u) == 0 ]] || { echo "SKIPPED: slurmd needs root to start jobs; this test did NOT run"; exit 77; }
# shellcheck source=tests/cluster/vcluster.sh
source "$here/vcluster.sh"
# shellcheck source=tests/cluster/slurm_lib.sh
source "$here/slurm_lib.sh"

started=$(date +%s)
say() { echo "[$(($(date +%s) - started)) s] $*"; }
pids=()  # daemons started here: munged, slurmctld, slurmd 1..3
tmp=""
dump() {  # the daemons' and jobs' logs, when something went wrong
  [[ -n $tmp ]] || return 0
  for f in "$tmp"/*.stderr "$tmp"/*.log "$tmp"/*.out; do [[ -f $f ]] && { echo "----- $f (last 40 lines)"; tail -40 "$f"; }; done
}
# Slurm's client commands, run on node 1 (the only place that reaches slurmctld).
sl() { ip netns exec "$(vc_node 1)" timeout 10 "$@"; }
cleanup() {
  trap - EXIT TERM INT
  # The timer first, then its sleep (the other order lets the timer fire on the killed sleep).
  if [[ -n ${watchdog:-} ]]; then kill "$watchdog" 2>/dev/null; pkill -P "$watchdog" 2>/dev/null; fi
  for p in ${helpers:-}; do kill "$p" 2>/dev/null; done
  if [[ -n ${SLURM_CONF:-} && ${#pids[@]} -gt 2 ]]; then
    sl scancel --quiet --full --signal=KILL --user=root 2>/dev/null
    sl scancel --quiet --user=root 2>/dev/null
  fi
  # slurmd 3..1, slurmctld, munged; then job steps left in a namespace (vc_down kills those too) or not
  slurm_stop_daemons "meridian-vc$VC_ID"
  vc_down
}
fail() { echo "FAIL: $*"; dump; exit 1; }

# What a killed earlier run of this test left on the host (munged runs outside the namespaces, and a
# stale one answers the new daemons with the old key: "Unauthorized credential").
pkill -9 -f "/tmp/meridian-vc203/" 2>/dev/null && sleep 1
vc_up 203 3  # exits 77 without namespaces; installs vc_down as the EXIT trap, replaced here
trap cleanup EXIT
trap 'fail "interrupted, or over the time limit of 300 s"' TERM INT
# Never hang: this timer (300 s), and every command waited for has a timeout of its own.
( exec >/dev/null 2>&1 </dev/null; sleep 300 && kill -TERM $$ ) &
watchdog=$!
tmp=$VC_DIR

slurm_clean_env
# --- munge: own key, socket on the shared filesystem (checked from node 3's namespace) ---------------
mkdir -p "$tmp/state"
slurm_start_munge "$tmp" vc_exec 3

# --- slurm.conf: 3 nodes, slurmctld on node 1 ---------------------------------------------------------
nodes="$(vc_node 1),$(vc_node 2),$(vc_node 3)"
cat >"$tmp/slurm.conf" <<CONF
ClusterName=meridiannodes
SlurmctldHost=$(vc_node 1)($(vc_addr 1))
SlurmctldPort=6817
SlurmdPort=6818
$(slurm_common_conf "$tmp")
# The filesystem is shared: every slurmd its own spool directory, pid and log file
SlurmdSpoolDir=$tmp/spool-%n
SlurmdPidFile=$tmp/slurmd-%n.pid
SlurmdLogFile=$tmp/slurmd-%n.log
# and its own temporary directory (the node's local scratch): srun --mpi=pmix puts the PMIx client
# directory (spmix_appdir_<uid>_<job>.<step>) there, the same name on every node
TmpFS=$tmp/%n/local
# A lost node: not responding after SlurmdTimeout, pinged every SlurmdTimeout/3
SlurmdTimeout=10
KillWait=5
MessageTimeout=5
# A requeued job may start again cred_expire (10 s) after its end; look for it every 2 s from then
# (the defaults, 60 s and 30 s, would add up to a minute here)
SchedulerParameters=sched_interval=2,bf_interval=2
NodeName=DEFAULT CPUs=2 RealMemory=1000 State=UNKNOWN
NodeName=$(vc_node 1) NodeAddr=$(vc_addr 1)
NodeName=$(vc_node 2) NodeAddr=$(vc_addr 2)
NodeName=$(vc_node 3) NodeAddr=$(vc_addr 3)
PartitionName=meridian Nodes=$nodes Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
# slurmd 22.05 always initialises its cgroup plugin (even with proctrack/linuxproc, task/none) and
# fails without a cgroup filesystem at /sys/fs/cgroup; `ip netns exec` mounts a fresh /sys for the
# namespace, without it. The host's hierarchy, seen through this shell's root (same files, no mount):
cat >"$tmp/cgroup.conf" <<CONF
CgroupPlugin=cgroup/v1
CgroupMountpoint=/proc/$$/root/sys/fs/cgroup
CONF
export SLURM_CONF=$tmp/slurm.conf
for k in 1 2 3; do mkdir -p "$tmp/spool-$(vc_node $k)" && chmod 755 "$tmp/spool-$(vc_node $k)"; done
vc_exec 1 slurmctld -D -i -f "$SLURM_CONF" >"$tmp/slurmctld.stderr" 2>&1 &
pids+=($!)
for k in 1 2 3; do
  vc_exec $k slurmd -D -f "$SLURM_CONF" -N "$(vc_node $k)" >"$tmp/slurmd-$k.stderr" 2>&1 &
  pids+=($!)
done
state="" deadline=$((SECONDS + 60))
while ((SECONDS < deadline)); do
  state=$(sl sinfo -h -N -o %T 2>/dev/null | sort | uniq -c | xargs)
  [[ $state == "3 idle" ]] && break
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || fail "a daemon (pid $p) exited during start-up"; done
  sleep 0.5
done
[[ $state == "3 idle" ]] || { sl sinfo -N -l; fail "the nodes are not all idle after 60 s: $state"; }
say "slurm up: $(slurmd -V), nodes $nodes idle (slurmctld on $(vc_addr 1):6817)"

# --- data and config ------------------------------------------------------------------------------
# shellcheck disable=SC2034  # fixture.sh uses it
mpirun=mpirun
# shellcheck source=tests/ckpt/fixture.sh
source "$src/tests/ckpt/fixture.sh"
steps=60
make_fixture "train: {batch: 8, steps: $steps, log_every: 1}
checkpoint: {every_steps: 5, keep_last: 20}"
cd "$tmp" || fail "cd $tmp"

# The job's environment (sbatch exports it to every task): MPI over TCP on eth0, ranks that yield
# when idle and one thread each (all 3 nodes share these cores). No binding: TaskPlugin=task/none
# (srun --cpu-bind=none would only warn "cluster configuration lacks support for cpu binding").
export MERIDIAN=$meridian LAUNCHER=srun EXTRA_ARGS="--comm-timeout ${COMM_TIMEOUT:-10}"
export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=eth0 OMPI_MCA_oob_tcp_if_include=eth0
export OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1 OMPI_MCA_hwloc_base_binding_policy=none

# submit NAME [sbatch options]: submits train.sbatch (from node 1); sets JOB
submit() {
  local name=$1; shift
  JOB=$(vc_exec 1 timeout 10 sbatch --parsable --nodes=2-3 --time=10 --job-name="$name" \
    --output="$tmp/$name.out" "$@" "$src/jobs/slurm/train.sbatch" --config "$tmp/small.yaml" --data "$tmp/data.h5")
  JOB=${JOB%%;*}
  [[ -n $JOB ]] || fail "$name: sbatch failed"
}
job_field() { sl scontrol show job "$1" 2>/dev/null | grep -oE "(^| )$2=[^ ]*" | head -1 | cut -d= -f2; }
# wait_job JOB SECONDS: until the job is finished (not PENDING/RUNNING/REQUEUED/...); prints its state
wait_job() {
  local s="" deadline=$((SECONDS + $2))
  while ((SECONDS < deadline)); do
    s=$(job_field "$1" JobState)
    case $s in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | BOOT_FAIL | OUT_OF_MEMORY | DEADLINE | PREEMPTED) break ;; esac
    sleep 0.5
  done
  echo "$s"
}
check_ckpt() {  # check_ckpt NAME FILE RANKS
  "$meridian" inspect "$2" >"$tmp/$1.inspect" 2>&1 || { cat "$tmp/$1.inspect"; fail "$1: checkpoint $2 does not verify"; }
  grep -q "written by $3 ranks" "$tmp/$1.inspect" || { cat "$tmp/$1.inspect"; fail "$1: $2 not written by $3 ranks"; }
}

# 1. A healthy job on 3 nodes (10 steps).
EXTRA_ARGS="$EXTRA_ARGS --set train.steps=10" submit healthy
st=$(wait_job "$JOB" 120)
say "healthy: job $JOB $st"
cat "$tmp/healthy.out"
[[ $st == COMPLETED ]] || { sl scontrol show job "$JOB"; fail "healthy: job $JOB is $st, not COMPLETED"; }
grep -q "train: 10 steps, .* over 3 ranks" "$tmp/healthy.out" || fail "healthy: no summary of 10 steps over 3 ranks"
grep -qF "restart 0: ? tasks on 3 node(s) [c${VC_ID}n[1-3]], tasks per node 1(x3)" "$tmp/healthy.out" ||
  fail "healthy: the job did not get the 3 nodes, one task each"
grep -q "3 ranks (3 nodes)" "$tmp/healthy.out" || fail "healthy: meridian does not report 3 ranks on 3 nodes"
run=$tmp/runs/$JOB
for k in 1 2 3; do  # each node's slurmd started a task of the step (rank logs: only rank 0 writes)
  grep -q "launch task StepId=$JOB.0 " "$tmp/slurmd-$(vc_node $k).log" || fail "healthy: $(vc_node $k) ran no task of step $JOB.0"
done
[[ -f $run/logs/rank_0.log && -f $run/logs/rank_1.log && -f $run/logs/rank_2.log ]] || fail "healthy: rank logs missing in $run/logs"
check_ckpt healthy "$run/checkpoints/step_00000010.h5" 3
say "healthy: 10 steps over 3 ranks, one on each of $nodes, checkpoint verifies"

# 2. The fault: node 3 lost after the first checkpoint.
now() { date +%s.%N; }
submit fault
run=$tmp/runs/$JOB
out=$tmp/fault.out
fault_step=${FAULT_STEP:-$((7 + RANDOM % 4))}  # 7..10 of 60: past the checkpoint of step 5
(
  for _ in $(seq 1 1800); do grep -qE "step +$fault_step/$steps" "$out" 2>/dev/null && break; sleep 0.05; done
  grep -qE "step +$fault_step/$steps" "$out" 2>/dev/null || exit 0
  vc_kill_node 3
  vc_link 3 down
  now >"$tmp/fault_at"
) &
injector=$!
# What happened when: the requeue (Restarts=1 in slurmctld), the first step logged after "resumed from".
(
  for _ in $(seq 1 3600); do [[ -f $tmp/fault_at ]] && break; sleep 0.05; done
  [[ -f $tmp/fault_at ]] || exit 0
  for _ in $(seq 1 1000); do
    [[ $(job_field "$JOB" Restarts) -ge 1 ]] 2>/dev/null && { now >"$tmp/requeued_at"; break; }
    sleep 0.2
  done
  for _ in $(seq 1 3600); do
    awk -v s="$steps" '/resumed from/{r=1} r && $0 ~ "step +[0-9]+/" s {f=1} END{exit !f}' "$out" 2>/dev/null &&
      { now >"$tmp/resumed_at"; break; }
    sleep 0.05
  done
) &
monitor=$!
helpers="$injector $monitor"
st=$(wait_job "$JOB" 200)
wait $injector
kill $monitor 2>/dev/null
wait $monitor 2>/dev/null
helpers=""
say "fault: job $JOB $st"
cat "$out"
[[ -f $tmp/fault_at ]] || fail "the fault was never injected (step $fault_step not seen)"
info=$(sl scontrol show job "$JOB")
echo "----- scontrol show job $JOB"
echo "$info"
echo "----- sinfo"
sl sinfo -N -o "%N %T %E" 2>&1
echo "----- slurmctld log about the node and the job"
grep -E "$(vc_node 3)|JobId=$JOB|job $JOB|requeue|Requeu|NODE_FAIL|not responding" "$tmp/slurmctld.log" | grep -v "debug" | tail -40
fault=$(cat "$tmp/fault_at")
if [[ -f $tmp/requeued_at ]]; then
  printf 'node 3 killed at step %d: the job was requeued %.1f s after the fault\n' "$fault_step" \
    "$(awk "BEGIN{print $(cat "$tmp/requeued_at") - $fault}")"
fi
if [[ -f $tmp/resumed_at ]]; then
  printf 'first resumed step (on 2 nodes) %.1f s after the fault\n' "$(awk "BEGIN{print $(cat "$tmp/resumed_at") - $fault}")"
fi
if ! grep -q "Restarts=[1-9]" <<<"$info"; then
  # Slurm requeues a job for a lost node only while the job still runs when the node is set DOWN
  # (SlurmdTimeout after its last answer). A job that ended first (the surviving ranks gave up after
  # --comm-timeout, srun stopped waiting for the lost node's task KillWait + 2 s later, the batch
  # script exited 3) is just FAILED. The evidence: when the job ended and when the node went down.
  for _ in $(seq 1 60); do grep -q "Nodes $(vc_node 3) not responding, setting DOWN" "$tmp/slurmctld.log" && break; sleep 0.5; done
  echo "----- the order of events (fault at $(date -u -d "@${fault%.*}" +%T))"
  grep -E "_job_complete: JobId=$JOB |Nodes $(vc_node 3) not responding|failure of node $(vc_node 3)" "$tmp/slurmctld.log"
  grep -E "^srun: |meridian train exited" "$out"
  fail "Slurm did not requeue job $JOB after node 3 was lost (state $(job_field "$JOB" JobState), reason $(job_field "$JOB" Reason), exit code $(job_field "$JOB" ExitCode)): see the order of events above (a job that ends before slurmctld sets the node DOWN is not requeued)"
fi
grep -qE "CANCELLED AT .* DUE TO NODE FAILURE|of the allocation are down or not responding: requeueing" "$out" ||
  fail "the first run of job $JOB was not ended for the node failure (by Slurm or train.sbatch)"
[[ $st == COMPLETED ]] || fail "the requeued job $JOB is $st, not COMPLETED"
grep -q "restart 1: .* on 2 node(s)" "$out" || fail "the requeued job did not run on 2 nodes"
grep -q "resumed from" "$out" || fail "the requeued job did not resume"
grep -qE "resume: 3 ranks -> 2" "$out" || fail "no elastic resume (3 ranks -> 2)"
resumed_from=$(grep -m1 -oE "resumed from [^ ]*step_[0-9]+\.h5" "$out" | grep -oE "[^ ]*step_[0-9]+\.h5")
"$meridian" inspect "$resumed_from" >/dev/null 2>&1 || fail "the checkpoint resumed from ($resumed_from) does not verify"
check_ckpt fault "$run/checkpoints/step_000000$steps.h5" 2
[[ -f $tmp/resumed_at ]] || fail "the first resumed step was not seen"
# Nothing of the job left on any node (the daemons are).
sleep 1
left=""
for p in $(vc_pids); do  # slurmd and slurmctld are still running
  case $(ps -o args= -p "$p" 2>/dev/null) in slurmd\ * | slurmctld\ * | *slurmscriptd | "") ;; *) left+=" $p" ;; esac
done
if [[ -n $left ]]; then
  ps -o pid,args -p "${left# }"
  fail "processes of the job left on the nodes after it ended"
fi
say "fault: node 3 lost at step $fault_step, job $JOB requeued by Slurm, resumed from $resumed_from on 2 nodes, finished"
echo "PASS ($(($(date +%s) - started)) s)"
