#!/usr/bin/env bash
# Usage: balance_cluster_test.sh MERIDIAN SOURCE_DIR MODE — train.balance auto across virtual nodes
# (tests/cluster/vcluster.sh, links at 1 Gbit/s), one rank per node, each pinned to a core, a small
# SigLIP whose step computes far more than it communicates. Throughput is the mean samples/s of the
# step log's intervals (metrics.csv, every 5 steps): the settled intervals (those holding no share
# change: the step after a change reads its batches again) and the whole run, against the sum of the
# nodes' solo speeds under the same load, measured after step 10 of 20 (the first steps are
# slower: step 1 takes seconds): each node alone (1 rank, the same batch per rank), all nodes at
# once, so every core carries what it carries in the balanced run (the quota, the nodes that share a
# core) and only the waiting for each other is missing. The solo runs are made twice,
# before and after the balanced run, and averaged: this VM's speed drifts by up to 20 % between
# minutes (node 1 alone: 504-623 samples/s in one afternoon), which one measurement would take as a
# gain or a loss of the balancer.
#   two     (ctest) 2 nodes; node 2 capped at half a core (a CPU quota, as a hypervisor's CPU limit
#           or a container's quota makes a slow VM) only after step 11, and freed after step 46:
#           absorbed within 3 windows (node 1 takes at least 58 % by step 26), given back within 3
#           (by step 61 its share fell back by 5 points at least, to within 10 of even); under the
#           cap the settled intervals of steps 22-46 against the solo sum (solos under the cap):
#           the goal, 90 %, printed; 72 % asserted (the even split: about 62 %).
#   two-figures  2 nodes, node 2 capped throughout: balanced against the solo sum (the goal: 90 %),
#           settled intervals and the whole run, printed beside the even split's (not asserted). Not
#           a ctest test: run by hand (docs/performance.md, "Uneven nodes").
#   three   3 nodes on 2 cores: node 1 has core 0; node 3 shares core 1 with node 2 under a CPU
#           quota of a third of a core (cgroup cpu.cfs_quota_us), node 2 has the rest: speeds 1, 2/3
#           and 1/3. Balanced against the solo sum (goal 85 %), printed. Not a ctest test: run by
#           hand (docs/performance.md, "Uneven nodes").
# Prints "figures: ..." lines for docs/performance.md. Exit 77 (skipped) when not root or network
# namespaces cannot be made. MERIDIAN_MPI_WAIT, when set, reaches every rank (block: MPI's spinning
# waits, to measure them).
set -u
meridian=$(realpath "$1") src=$(realpath "$2") mode=$3
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/cluster/vcluster.sh
source "$here/vcluster.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
case $mode in
  two | two-figures) id=220 nodes=2 goal=0.90 batch=192 ;;
  three) id=221 nodes=3 goal=0.85 batch=128 ;;
  *) echo "unknown mode '$mode'"; exit 1 ;;
esac
cg= g=  # the cgroup-v1 cpu hierarchy and the slow node's group in it (below)
cleanup() {
  if [[ -n $g && -d $g ]]; then
    while read -r t; do echo "$t" >"$cg/tasks"; done <"$g/tasks" 2>/dev/null
    rmdir "$g" 2>/dev/null
  fi
  [[ -n $cg ]] && umount "$cg" 2>/dev/null
  vc_down
}
fail() { cleanup; echo "FAIL ($mode): $*"; exit 1; }
vc_up "$id" $nodes 1gbit
trap cleanup EXIT
vc_mpirun_cmd
[[ -n ${MERIDIAN_MPI_WAIT:-} ]] && VC_MPIRUN+=(-x MERIDIAN_MPI_WAIT)
tmp=$VC_DIR
"$meridian" prep synthetic --count 1024 --size 32 --vocab-size 300 --context-length 16 --out "$tmp/data.h5" \
  --log-level warn >/dev/null || fail "prep exited $?"
cat >"$tmp/model.yaml" <<YAML
model:
  image_size: 32
  patch: 4
  vision: {width: 64, depth: 3, heads: 4, mlp_ratio: 4}
  context_length: 16
  vocab_size: 300
  text: {width: 64, depth: 1, heads: 2, mlp_ratio: 4}
  embed: 64
train: {batch: $batch, log_every: 5, health_every: 0, balance_every: 5}
optim: {lr: 1.0e-3, warmup: 3}
YAML

# Each node's rank pinned to a core: node 1 on core 0, nodes 2 and 3 on core 1. The slow node (node 2
# of two, node 3 of three) runs in a CPU cgroup with a quota (cgroup v1 cpu.cfs_quota_us, of every
# 10 ms: smooth, where 100 ms periods stop it for most of 100 ms at a time): half a core in MODE two;
# a third in MODE three, where node 2 has the rest of core 1: speeds 1, 2/3 and 1/3 of a core. A
# quota, not a busy loop beside the node: the scheduler splits a core between a busy loop and a rank
# that sleeps while it waits unevenly (a rank waking from a wait runs ahead of the loop), so the
# node's speed moved by 20 % within a run and the balanced run measured it faster than it ran alone.
# The cgroup-v1 cpu hierarchy is mounted again under $tmp: `ip netns exec` mounts a sysfs of its own,
# without /sys/fs/cgroup.
slow=$nodes quota=$((10000 / (nodes == 2 ? 2 : 3)))
cg=$tmp/cpu
mkdir -p "$cg" && mount -t cgroup -o cpu cgroup "$cg" 2>/dev/null || vc_skip "cannot mount the cgroup-v1 cpu controller"
g=$cg/meridian-vc$id-slow
mkdir -p "$g" || vc_skip "cannot make cgroup $g"
echo 10000 >"$g/cpu.cfs_period_us"
cap() { echo "$1" >"$g/cpu.cfs_quota_us"; }  # cap US|-1: the slow node's quota per 10 ms, or none
cap $quota
cat >"$tmp/pinned" <<PIN
#!/bin/bash
k=\$(hostname | sed 's/.*n//')
[[ \$k == $slow ]] && { echo \$\$ >"$g/tasks" || exit 1; }
core=1
[[ \$k == 1 ]] && core=0
exec taskset -c \$core "$meridian" "\$@"
PIN
chmod +x "$tmp/pinned"

# run_train NAME NODES [ARGS...]: on nodes 1..NODES (NODES < nodes: the first ones, or "solo K": node K
# alone); its exit status. train: the same, failing the test when it fails.
run_train() {
  local name=$1 where=$2
  shift 2
  local first=1 np=$where
  if [[ $where == solo* ]]; then first=${where#solo } np=1; fi
  local hosts
  hosts=$(sed -n "${first},$((first + np - 1))p" "$VC_HOSTFILE" | paste -sd, | sed 's/ slots=1//g')
  vc_exec "$first" "${VC_MPIRUN[@]}" -np "$np" --host "$hosts" "$tmp/pinned" train --config "$tmp/model.yaml" \
    --data "$tmp/data.h5" --run-dir "$tmp/$name" "$@" >"$tmp/$name.out" 2>&1
}
train() { run_train "$@" || { tail -30 "$tmp/$1.out"; fail "train $1 exited"; }; }
# solos ROUND: every node alone at once, $steps steps each (solo<ROUND>_<K>); a background run only
# reports its status: the cluster is torn down once, here.
solos() {
  local k pids=()
  for ((k = 1; k <= nodes; k++)); do
    run_train "solo$1_$k" "solo $k" --set train.steps=$steps &
    pids+=($!)
  done
  for k in "${!pids[@]}"; do
    wait "${pids[$k]}" || { tail -30 "$tmp/solo$1_$((k + 1)).out"; fail "train solo$1_$((k + 1)) exited"; }
  done
}
# solo_sum: node K's solo speed (the mean of its two rounds) for every K, and their sum, as
# "S1 S2 ... SUM".
solo_sum() {
  local k speeds=() r1 r2
  for ((k = 1; k <= nodes; k++)); do
    r1=$(rate "solo1_$k" 10 $steps) r2=$(rate "solo2_$k" 10 $steps)
    speeds+=("$(python3 -c "print(f'{($r1 + $r2) / 2:.2f}')")")
    echo "node $k alone: $r1, then $r2 samples/s" >&2
  done
  python3 -c "import sys; v = [float(x) for x in sys.argv[1:]]; print(*v, f'{sum(v):.2f}')" "${speeds[@]}"
}
# rate NAME FROM TO: mean samples/s of the logged intervals ending after step FROM and up to TO.
rate() {
  python3 - "$tmp/$1/metrics.csv" "$2" "$3" <<'PY'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["name"] == "train/samples_per_s"]
v = [float(r["value"]) for r in rows if int(sys.argv[2]) < int(r["step"]) <= int(sys.argv[3])]
print(f"{sys.argv[1].split('/')[-2]}: intervals {', '.join(f'{x:.0f}' for x in v)} samples/s", file=sys.stderr)
print(f"{sum(v) / len(v):.2f}" if v else "nan")
PY
}
shares_at() { grep -oE "step +$2/[0-9]+ .*shares [0-9/]+ %" "$tmp/$1.out" | grep -oE "shares [0-9/]+" | cut -d' ' -f2; }

# wait_for NAME STEP: until NAME's log shows logged step STEP (a bash read every 0.25 s: a grep
# every few ms would itself load the cores these nodes share).
wait_for() {
  local out=$tmp/$1.out line
  line=$(printf "step %6d/" "$2")
  for _ in $(seq 1 2400); do
    [[ -f $out && $(<"$out") == *"$line"* ]] && return 0
    sleep 0.25
  done
  return 1
}

steps=20
# settled NAME FROM TO: the mean samples/s of NAME's logged intervals ending after step FROM and up to
# TO that hold no share change (a change after step N: the interval holding step N + 1, where the
# batches are read again), and how many there were, as "RATE COUNT".
settled() {
  python3 - "$tmp/$1/metrics.csv" "$2" "$3" "$tmp/$1.out" <<'PY'
import csv, re, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["name"] == "train/samples_per_s"]
after = {int(n) + 1 for n in re.findall(r"batch shares at step (\d+):", open(sys.argv[4]).read())}
lo, hi, last, v = int(sys.argv[2]), int(sys.argv[3]), 0, []
for r in sorted(rows, key=lambda r: int(r["step"])):
    step = int(r["step"])
    if lo < step <= hi and not any(last < n <= step for n in after):
        v.append(float(r["value"]))
    last = step
print(f"{sys.argv[1].split('/')[-2]}: settled intervals {', '.join(f'{x:.0f}' for x in v)} samples/s", file=sys.stderr)
print(f"{sum(v) / len(v):.2f} {len(v)}" if v else "nan 0")
PY
}
if [[ $mode == two ]]; then
  # A node slowed mid-run and freed again: no cap until step 11, capped until step 46, free to 61.
  # The solo speeds under the cap around it.
  solos 1
  cap -1
  (
    wait_for shift 11 || exit 1
    cap $quota
    wait_for shift 46
    cap -1
  ) &
  driver=$!
  train shift 2 --set train.steps=61 --set train.balance=auto
  wait $driver || fail "the cap was not set"
  cap $quota
  solos 2
  # (Logged steps: 1, 6, 11, ...; windows end at 3, 5, 10, 15, ...) Absorbed within 3 windows of the
  # cap (15, 20, 25): node 1 takes at least 58 % (about 2:1 at half speed) by step 26. Given back
  # within 3 windows of its end (50, 55, 60): by step 61 node 1's share fell back by 5 points at
  # least, to within 10 of even. (Not against the shares before the cap: the first windows are
  # noisy, one run started at 40/60 uncapped.)
  unloaded=$(shares_at shift 11) loaded=$(shares_at shift 26) freed=$(shares_at shift 61)
  echo "shares, node 2 capped after step 11 to step 46: step 11 $unloaded, step 26 $loaded, step 46 $(shares_at shift 46), step 61 $freed"
  grep "batch shares at" "$tmp/shift.out" | sed 's/.*\] //'
  [[ ${loaded%%/*} -ge 58 ]] || fail "the slow node was not absorbed by step 26 (shares $loaded %, node 1 first)"
  ((${freed%%/*} <= ${loaded%%/*} - 5 && ${freed%%/*} >= 40 && ${freed%%/*} <= 60)) ||
    fail "the recovered node did not get its share back by step 61 (shares $freed %, $loaded % under the cap)"
  # Under the cap, once absorbed: the settled intervals of steps 22-46 (those holding no change)
  # against the sum of the solo speeds under the same cap; the whole capped stretch (steps 12-46,
  # the absorbing included) printed beside it. The goal, 90 %, is printed, not asserted: on this VM
  # the balanced run's intervals move by 20 % within a run (749-917 samples/s in one) where the solo
  # runs' move by 3 %: 9 of 10 runs of tests/flaky.sh met it (91-98 %; the tenth 84 %), then 1 of 5
  # later ones (78-98 %; docs/performance.md). Asserted: 72 %, below every run's, where the even
  # split reaches about 62 % (2 x node 2's solo speed).
  read -r s1 s2 solo <<<"$(solo_sum)"
  read -r bal count <<<"$(settled shift 21 46)"
  whole=$(rate shift 11 46)
  python3 - "$bal" "$count" "$whole" "$solo" "$s1" "$s2" <<'PY' || fail "under the cap the settled intervals are below 72 % of the solo sum"
import math, sys
bal, count, whole, solo, s1, s2 = map(float, sys.argv[1:])
print(f"figures: solo node 1 {s1:.2f}, node 2 (half a core) {s2:.2f}, sum {solo:.2f} samples/s; under the cap: "
      f"settled intervals {bal:.2f} ({int(count)} of 5 in steps 22-46) = {100 * bal / solo:.1f} % (goal 90 %: "
      f"{'met' if bal >= 0.9 * solo else 'not met'}), steps 12-46 {whole:.2f} = {100 * whole / solo:.1f} % of the "
      f"solo sum")
sys.exit(0 if all(map(math.isfinite, (bal, solo))) and count >= 3 and bal >= 0.72 * solo else 1)
PY
  echo "PASS ($mode)"
  exit 0
fi
# two-figures and three: the solo speeds around the even and the balanced run.
solos 1
train even $nodes --set train.steps=$steps
train balanced $nodes --set train.steps=30 --set train.balance=auto
solos 2
even=$(rate even 10 $steps) whole=$(rate balanced 1 30)
read -r bal count <<<"$(settled balanced 5 30)"
grep "batch shares at" "$tmp/balanced.out" | sed 's/.*\] //'
if [[ $mode == two-figures ]]; then
  read -r s1 s2 solo <<<"$(solo_sum)"
  echo "figures: solo node 1 $s1, solo node 2 (half a core) $s2, sum $solo samples/s"
else
  read -r s1 s2 s3 solo <<<"$(solo_sum)"
  echo "figures: solo nodes $s1, $s2 (core 1 less node 3's third), $s3 (a third of a core), sum $solo samples/s"
fi
# Printed, not asserted: the throughput against the issue's goal and the even split. On this VM a
# node's speed depends on what the other core runs, and moves by the second: one core's float32 GEMM
# rate was 188-305 per second with the other core idle, 155-191 with a GEMM on the other core (its
# two vCPUs share a host core or its memory path), and node 1 alone ran at 392 and at 534 samples/s
# in one test. So a fraction of the solo sum moves by more than the margin between the goal and
# what balancing reaches (two nodes: 79-106 % in 8 runs; three: 85-91 % in 5; docs/performance.md).
python3 - "$even" "$bal" "$solo" "$goal" "$whole" "$count" <<'PY' || fail "no figures (a rate or a solo speed is missing or not a number)"
import math, sys
even, bal, solo, goal, whole, count = map(float, sys.argv[1:])
if not all(map(math.isfinite, (even, bal, solo, whole))) or min(even, bal, solo) <= 0:
    sys.exit(print(f"FAIL: figures even {even}, balanced {bal}, solo sum {solo}") or 1)
print(f"figures: even split {even:.2f} samples/s = {100 * even / solo:.0f} % of the solo sum; "
      f"balanced, settled intervals ({int(count)} of 6 in steps 2-30) {bal:.2f} = {100 * bal / solo:.0f} % (goal "
      f"{100 * goal:.0f} %: {'met' if bal >= goal * solo else 'not met'}), {bal / even:.2f}x the even split; "
      f"the whole run (steps 2-30) {whole:.2f} = {100 * whole / solo:.0f} %")
PY
echo "PASS ($mode)"
