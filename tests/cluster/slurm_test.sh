#!/usr/bin/env bash
# Usage: slurm_test.sh MERIDIAN SOURCE_DIR — the real job scripts (jobs/slurm/*.sbatch) on a real
# Slurm: a one-node cluster made of this host with munged, slurmctld and slurmd started here from a
# generated configuration (its own ports, munge socket and key, spool and state directories under a
# temporary directory, so an installed or running Slurm/munge is not touched). Then, with 2 tasks:
#  1. prep.sbatch makes a held-out split (srun --mpi=pmix);
#  2. train.sbatch trains a tiny SigLIP with LAUNCHER=srun (after `meridian doctor`, DOCTOR=1) and
#     again with LAUNCHER=mpirun: exit 0, both ranks' logs and the final checkpoint in runs/<job id>;
#  3. eval.sbatch evaluates the srun run's newest checkpoint on the held-out split; detect.sbatch
#     and lm-sft.sbatch run a few steps of their workloads;
#  4. requeue: a long run gets SIGUSR1 on its batch shell (`scancel --signal=USR1 --batch`, what
#     --signal=B:USR1@120 does before the time limit); meridian checkpoints and exits 4, the script
#     runs `scontrol requeue`, and the job's second run, same id and run directory, logs "resumed
#     from" that checkpoint and finishes (the test shortens train.steps in the config file once the
#     first run stopped, so the resumed run ends by itself, 100 steps later).
# Daemons and temporary files are removed however the test ends. Exit 77 (skipped) without
# slurm-wlm/munge (jobs/setup-node.sh installs them) or when not root (slurmd must be root).
set -u
meridian=$(realpath "$1") src=$(realpath "$2")
export PATH=$PATH:/usr/sbin:/sbin
for tool in munged slurmctld slurmd sbatch srun scontrol scancel sinfo squeue; do
  command -v $tool >/dev/null || { echo "SKIPPED: $tool not found (apt-get install slurm-wlm munge); this test did NOT run"; exit 77; }
done
[[ $(id -u) == 0 ]] || { echo "SKIPPED: slurmd needs root to start jobs; this test did NOT run"; exit 77; }
command -v mpirun >/dev/null || { echo "FAIL: mpirun not found"; exit 1; }

# shellcheck source=tests/cluster/slurm_lib.sh
source "$(dirname "$0")/slurm_lib.sh"
started=$(date +%s)
say() { echo "[$(( $(date +%s) - started )) s] $*"; }
tmp=$(mktemp -d /tmp/meridian-slurm.XXXXXX)
pids=()  # daemons started here: munged, slurmctld, slurmd
dump() {  # the daemons' and jobs' logs, when something went wrong
  for f in "$tmp"/*.stderr "$tmp"/*.log "$tmp"/*.out; do [[ -f $f ]] && { echo "----- $f (last 40 lines)"; tail -40 "$f"; }; done
}
cleanup() {
  trap - EXIT TERM INT
  # The timer first, then its sleep (the other order let the timer fire on the killed sleep).
  if [[ -n ${watchdog:-} ]]; then kill "$watchdog" 2>/dev/null; pkill -P "$watchdog" 2>/dev/null; fi
  [[ -n ${waiter:-} ]] && kill "$waiter" 2>/dev/null  # a `timeout sbatch --wait` still waiting
  if [[ -n ${SLURM_CONF:-} && ${#pids[@]} -gt 1 ]]; then
    timeout 10 scancel --quiet --full --signal=KILL --user=root 2>/dev/null
    timeout 10 scancel --quiet --user=root 2>/dev/null
  fi
  slurm_stop_daemons "$tmp"  # slurmd, slurmctld, munged, then job steps that outlived slurmd
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; dump; exit 1; }
trap 'fail "interrupted, or over the time limit of 360 s"' TERM INT
# Never hang: the whole test ends, with its cleanup, inside ctest's 600 s: this timer (360 s) plus
# the longest single command it may have to wait for (180 s, every one has a timeout). (The timer
# holds no output descriptor, so nothing that reads this test's output waits for it.)
( exec >/dev/null 2>&1 </dev/null; sleep 360 && kill -TERM $$ ) &
watchdog=$!

slurm_clean_env
# --- munge: own key and socket ----------------------------------------------------------------
mkdir -p "$tmp/state" "$tmp/spool" "$tmp/local"
slurm_start_munge "$tmp"

# --- slurm.conf: this host as the only node, two free ports -------------------------------------
host=$(hostname -s)
read -r ctld_port slurmd_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
cpus=$(nproc); ((cpus < 2)) && cpus=2  # 2 tasks are needed; config_overrides lets slurmd accept it
cat >"$tmp/slurm.conf" <<CONF
ClusterName=meridiantest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
$(slurm_common_conf "$tmp" 4)
SlurmdSpoolDir=$tmp/spool
# srun --mpi=pmix makes its directories here (spmix_appdir_*): not in /tmp, where one that an
# earlier, killed run left makes every step launch fail ("File exists")
TmpFS=$tmp/local
SlurmdPidFile=$tmp/slurmd.pid
SlurmdLogFile=$tmp/slurmd.log
KillWait=10
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=meridian Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF=$tmp/slurm.conf
slurmctld -D -i -f "$SLURM_CONF" >"$tmp/slurmctld.stderr" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" -N "$host" >"$tmp/slurmd.stderr" 2>&1 &
pids+=($!)
state="" deadline=$((SECONDS + 60))
while ((SECONDS < deadline)); do
  state=$(timeout 5 sinfo -h -N -n "$host" -o %T 2>/dev/null)
  [[ $state == idle ]] && break
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || fail "a daemon (pid $p) exited during start-up"; done
  sleep 0.5
done
[[ $state == idle ]] || fail "node $host is '$state', not idle, after 60 s"
say "slurm up: node $host idle (slurmctld :$ctld_port, slurmd :$slurmd_port)"

# --- data and config ------------------------------------------------------------------------------
# shellcheck disable=SC2034  # fixture.sh uses it
mpirun=mpirun
# shellcheck source=tests/ckpt/fixture.sh
source "$src/tests/ckpt/fixture.sh"
make_fixture "train: {batch: 8, steps: 12, log_every: 4}
checkpoint: {every_steps: 6, keep_last: 2}"
cd "$tmp" || fail "cd $tmp"
export MERIDIAN=$meridian  # the job scripts find lib.sh themselves (next to the submitted script)

# submit NAME SBATCH [sbatch options] -- [script arguments]: runs the job to its end (sbatch --wait),
# prints its output; sets JOB and JOB_RC.
submit() {
  local name=$1 script=$2; shift 2
  local opts=() args=()
  while [[ $# -gt 0 && $1 != -- ]]; do opts+=("$1"); shift; done
  [[ ${1:-} == -- ]] && shift
  args=("$@")
  local t0
  t0=$(date +%s)
  # in the background: a signal to this test (the time limit) interrupts `wait`, not a foreground command
  timeout 180 sbatch --parsable --wait --nodes=1 --ntasks=2 --time=10 --job-name="$name" --output="$tmp/$name.out" \
    "${opts[@]}" "$src/jobs/slurm/$script" "${args[@]}" >"$tmp/$name.id" &
  waiter=$!
  wait $waiter
  JOB_RC=$? waiter=""
  JOB=$(cut -d';' -f1 "$tmp/$name.id")
  say "$name: job ${JOB:-?} ($script ${opts[*]}) ended with $JOB_RC after $(( $(date +%s) - t0 )) s"
  ((JOB_RC == 124)) && fail "$name: sbatch --wait still waiting after 180 s"
  cat "$tmp/$name.out" 2>/dev/null
}
# check_train NAME: exit 0, both ranks ran, final checkpoint valid in runs/<job id>
check_train() {
  local name=$1 run=$tmp/runs/$JOB
  ((JOB_RC == 0)) || fail "$name: job exited $JOB_RC"
  grep -q "train: 12 steps, .* over 2 ranks" "$tmp/$name.out" || fail "$name: no summary of 12 steps over 2 ranks"
  [[ -f $run/logs/rank_0.log && -f $run/logs/rank_1.log ]] || fail "$name: rank logs missing in $run/logs"
  [[ $(cat "$run/checkpoints/latest" 2>/dev/null) == step_00000012.h5 ]] || fail "$name: latest checkpoint is not step 12"
  "$meridian" inspect "$run/checkpoints/step_00000012.h5" >"$tmp/$name.inspect" 2>&1 || { cat "$tmp/$name.inspect"; fail "$name: checkpoint does not verify"; }
  grep -q "written by 2 ranks" "$tmp/$name.inspect" || { cat "$tmp/$name.inspect"; fail "$name: checkpoint not written by 2 ranks"; }
}

# 1. prep.sbatch: a held-out split with the training data's tokenizer.
submit prep prep.sbatch -- synthetic --count 64 --seed 7 --size 32 --context-length 16 --tokenizer "$tmp/data.h5" \
  --out heldout.h5 --log-level warn
((JOB_RC == 0)) || fail "prep: job exited $JOB_RC"
"$meridian" inspect "$tmp/heldout.h5" >"$tmp/heldout.inspect" 2>&1 || { cat "$tmp/heldout.inspect"; fail "prep: dataset invalid"; }

# 2. train.sbatch under srun --mpi=pmix and under mpirun.
LAUNCHER=srun DOCTOR=1 submit train-srun train.sbatch -- --config "$tmp/small.yaml" --data "$tmp/data.h5"
check_train train-srun
grep -qE "^doctor: [0-9]+ OK, [0-9]+ WARN, 0 FAIL" "$tmp/train-srun.out" || fail "train-srun: no doctor report (DOCTOR=1) before training"
srun_job=$JOB
LAUNCHER=mpirun CONFIG=$tmp/small.yaml DATA=$tmp/data.h5 submit train-mpirun train.sbatch
check_train train-mpirun
grep -q "command: mpirun -np 2" "$tmp/train-mpirun.out" || fail "train-mpirun: not launched with mpirun"

# 3. eval.sbatch on the srun run's newest checkpoint.
submit eval eval.sbatch -- --run-dir "runs/$srun_job" --data "$tmp/heldout.h5"
((JOB_RC == 0)) || fail "eval: job exited $JOB_RC"
grep -qE "^eval: i2t_r1 [0-9.]+ .* zero_shot [0-9.]+" "$tmp/eval.out" || fail "eval: no metrics in the output"
[[ -f $tmp/runs/$srun_job/eval-$JOB/logs/rank_1.log ]] || fail "eval: rank logs not in the run directory"

# 3b. The workload wrappers: detect.sbatch and lm-sft.sbatch (train.sbatch with their defaults).
"$meridian" prep synthetic --kind detection --count 32 --size 64 --out "$tmp/det.h5" --log-level warn >/dev/null \
  || fail "prep of the detection set"
# detect.sbatch as its header shows it (its own recipe, jobs/configs/yolo-coco.yaml, at --scale s),
# made small for this machine.
submit detect detect.sbatch -- --scale s --data "$tmp/det.h5" --set data.image_size=64 --set train.epochs=0 \
  --set train.steps=4 --set train.batch=4 --set model.width=0.125 --set data.close_mosaic=0 --set train.eval_every=0 \
  --set train.precision=float32
((JOB_RC == 0)) || fail "detect: job exited $JOB_RC"
grep -q "train: 4 steps, .* over 2 ranks" "$tmp/detect.out" || fail "detect: no summary of 4 steps over 2 ranks"
grep -q "yolo12s.yaml" "$tmp/detect.out" || fail "detect: --scale s did not choose yolo12s.yaml"
# lm-sft with its own recipe (jobs/configs/llama2-7b-sft.yaml) from a small Hugging Face Llama directory.
python3 "$src/tests/models/hf_llama.py" make "$tmp/hf_llama" >/dev/null || fail "the reference Llama"
"$meridian" prep synthetic --kind text --count 64 --tokenizer "$tmp/hf_llama" --out "$tmp/sft.h5" --log-level warn \
  >/dev/null || fail "prep of the text set"
PRECISION=float32 submit lm-sft lm-sft.sbatch -- --data "$tmp/sft.h5" --init "$tmp/hf_llama" --set train.epochs=0 \
  --set train.steps=4 --set train.batch=2 --set train.accumulate=1 --set data.seq_len=64 --set data.mode=pack \
  --set checkpoint.async=false
((JOB_RC == 0)) || fail "lm-sft: job exited $JOB_RC"
grep -q "train: 4 steps, .* over 2 ranks" "$tmp/lm-sft.out" || fail "lm-sft: no summary of 4 steps over 2 ranks"
grep -q "ZeRO-3: optimizer state, gradients and parameters sharded" "$tmp/lm-sft.out" || fail "lm-sft: ZeRO-3 not in use"
grep -q "tensors (.*) loaded from .*hf_llama" "$tmp/lm-sft.out" || fail "lm-sft: the weights of --init DIR not loaded"

# 4. Requeue: SIGUSR1 -> checkpoint, exit 4 -> scontrol requeue -> same job resumes.
sed -i 's/^train: .*/train: {batch: 8, steps: 1000000, log_every: 20}/; s/^checkpoint: .*/checkpoint: {every_steps: 0}/' \
  "$tmp/small.yaml"
timeout 240 sbatch --parsable --wait --nodes=1 --ntasks=2 --time=10 --job-name=requeue --output="$tmp/requeue.out" \
  "$src/jobs/slurm/train.sbatch" --config "$tmp/small.yaml" --data "$tmp/data.h5" >"$tmp/requeue.id" &
waiter=$!
for _ in $(seq 1 600); do grep -qE "step +[0-9]+/1000000" "$tmp/requeue.out" 2>/dev/null && break; sleep 0.1; done
job=$(cut -d';' -f1 "$tmp/requeue.id")
seen=$(grep -oE "step +[0-9]+/1000000" "$tmp/requeue.out" 2>/dev/null | tail -1 | grep -oE "[0-9]+" | head -1)
[[ -n $seen && -n $job ]] || { kill $waiter 2>/dev/null; fail "requeue: job ${job:-?} did not start training within 60 s"; }
timeout 10 scancel --signal=USR1 --batch "$job" || fail "requeue: scancel --signal=USR1 --batch exited $?"
say "requeue: job $job at step $seen, sent SIGUSR1 to its batch shell"
# The resumed run reads the config again: once the first run has stopped, make it end 100 steps later.
# (Setting the end before the signal raced it: Slurm took 3 s to deliver it in one run, 780 steps here.)
# The requeued job starts about 15 s after the stop.
for _ in $(seq 1 600); do grep -q "stopped at step [0-9]* on request" "$tmp/requeue.out" 2>/dev/null && break; sleep 0.1; done
first_stop=$(grep -oE "stopped at step [0-9]+ on request" "$tmp/requeue.out" | head -1 | grep -oE "[0-9]+")
[[ -n $first_stop ]] || { kill $waiter 2>/dev/null; fail "requeue: meridian did not stop within 60 s of the signal"; }
final=$((first_stop + 100))
sed -i "s/steps: 1000000/steps: $final/" "$tmp/small.yaml"
grep -q "job $job (requeue) restart 1" "$tmp/requeue.out" &&
  { kill $waiter 2>/dev/null; fail "requeue: the second run started before its config could be shortened"; }
wait $waiter
rc=$? waiter=""
say "requeue: job $job ended with $rc"
cat "$tmp/requeue.out"
((rc == 124)) && fail "requeue: sbatch --wait still waiting after 240 s"
run=$tmp/runs/$job
grep -q "stopped at step [0-9]* on request" "$tmp/requeue.out" || fail "requeue: meridian did not stop on the signal"
stopped=$(grep -oE "stopped at step [0-9]+ on request" "$tmp/requeue.out" | head -1 | grep -oE "[0-9]+")
grep -q "requeueing job $job" "$tmp/requeue.out" || fail "requeue: the script did not requeue after exit code 4"
grep -q "job $job (requeue) restart 1" "$tmp/requeue.out" || fail "requeue: no second run (restart 1) of job $job"
grep -q "resumed from $run/checkpoints/step_$(printf %08d "$stopped").h5: step $stopped" "$tmp/requeue.out" \
  || fail "requeue: the second run did not resume from step $stopped in $run"
((stopped < final)) || fail "requeue: stopped at $stopped, past the shortened run ($final); signal too late"
grep -q "train: $((final - stopped)) steps, .* over 2 ranks" "$tmp/requeue.out" || fail "requeue: the resumed run did not finish"
((rc == 0)) || fail "requeue: the job ended with $rc"
[[ $(cat "$run/checkpoints/latest") == step_$(printf %08d $final).h5 ]] || fail "requeue: no final checkpoint"
info=$(timeout 10 scontrol show job "$job")
if ! grep -q "JobState=COMPLETED" <<<"$info" || ! grep -q "Restarts=1 " <<<"$info"; then
  echo "$info"; fail "requeue: job $job not COMPLETED after 1 restart"
fi
say "requeue: stopped at step $stopped, requeued, resumed and finished at step $final (COMPLETED, Restarts=1)"
echo "PASS ($(( $(date +%s) - started )) s)"
