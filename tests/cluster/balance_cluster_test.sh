#!/usr/bin/env bash
# Usage: balance_cluster_test.sh MERIDIAN SOURCE_DIR MODE — train.balance auto across virtual nodes
# (tests/cluster/vcluster.sh, links at 1 Gbit/s), one rank per node, each pinned to a core, a small
# SigLIP whose step computes far more than it communicates. Throughput is the mean samples/s of the
# step log's intervals once the shares have settled (metrics.csv), against the sum of the nodes'
# solo speeds measured under the same load (each node alone, 1 rank, the same batch per rank):
#   two     2 nodes; a busy loop pinned to node 2's core (another tenant: about half speed).
#           Balanced over steps 11-25: its fraction of the solo sum is printed against the goal of
#           90 % and its ratio to the even split (neither asserted: see the end). Then a
#           run where the loop starts only after step 11 and stops after step 31: node 1 takes at
#           least 58 % by step 26, and by step 50 its share fell back by 5 points at least, to
#           within 10 of even.
#   three   3 nodes on 2 cores: node 1 has core 0; node 3 shares core 1 with node 2 under a CPU
#           quota of a third of a core (cgroup cpu.cfs_quota_us), node 2 has the rest: speeds 1, 2/3
#           and 1/3 (node 2's solo speed is measured beside a busy loop under node 3's quota).
#           Printed against the goal of 85 % of the solo sum. Not a ctest test: run by hand
#           (docs/performance.md, "Uneven nodes").
# Prints "figures: ..." lines for docs/performance.md. Exit 77 (skipped) when not root or network
# namespaces cannot be made.
set -u
meridian=$(realpath "$1") src=$(realpath "$2") mode=$3
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/cluster/vcluster.sh
source "$here/vcluster.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
case $mode in
  two) id=220 nodes=2 goal=0.90 batch=192 ;;
  three) id=221 nodes=3 goal=0.85 batch=128 ;;
  *) echo "unknown mode '$mode'"; exit 1 ;;
esac
busy=
cgroups=()
stop_busy() { [[ -n $busy ]] && { kill "$busy" 2>/dev/null; wait "$busy" 2>/dev/null; }; busy=; }
cleanup() {
  stop_busy
  for g in "${cgroups[@]}"; do
    [[ -d $g ]] || continue
    while read -r t; do echo "$t" >"$cg/tasks"; done <"$g/tasks" 2>/dev/null
    rmdir "$g" 2>/dev/null
  done
  [[ -n ${cg:-} ]] && umount "$cg" 2>/dev/null
  vc_down
}
fail() { cleanup; echo "FAIL ($mode): $*"; exit 1; }
vc_up "$id" $nodes 1gbit
trap cleanup EXIT
vc_mpirun_cmd
# Waiting ranks sleep rather than spin (comm/mpi_wait.h), as docs/running.md advises where cores are
# shared; MERIDIAN_MPI_WAIT=block measures MPI's spinning waits instead.
export MERIDIAN_MPI_WAIT=${MERIDIAN_MPI_WAIT:-poll}
VC_MPIRUN+=(-x MERIDIAN_MPI_WAIT)
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

# Each node's rank pinned to a core: node 1 on core 0, nodes 2 and 3 on core 1. In MODE three node 3
# runs in a CPU cgroup with a quota of a third of a core (cgroup v1 cpu.cfs_quota_us, of every 10 ms:
# smooth, where 100 ms periods stop it for 67 ms at a time), and node 2 has the rest of core 1: the
# speeds are 1, 2/3 and 1/3 of a core. (Quotas on every node measured 76-99 %: a rank that waits in
# MPI spins, and the spinning spends its own quota.) The cgroup-v1 cpu hierarchy is mounted again
# under $tmp: `ip netns exec` mounts a sysfs of its own, without /sys/fs/cgroup.
cg=
if [[ $mode == three ]]; then
  cg=$tmp/cpu
  mkdir -p "$cg" && mount -t cgroup -o cpu cgroup "$cg" 2>/dev/null || vc_skip "cannot mount the cgroup-v1 cpu controller"
  g=$cg/meridian-vc$id-n3
  mkdir -p "$g" || vc_skip "cannot make cgroup $g"
  cgroups+=("$g")
  echo 10000 >"$g/cpu.cfs_period_us"
  echo 3333 >"$g/cpu.cfs_quota_us"
fi
cat >"$tmp/pinned" <<PIN
#!/bin/bash
k=\$(hostname | sed 's/.*n//')
[[ -n "$cg" && \$k == 3 ]] && { echo \$\$ >"$cg/meridian-vc$id-n3/tasks" || exit 1; }
core=1
[[ \$k == 1 ]] && core=0
exec taskset -c \$core "$meridian" "\$@"
PIN
chmod +x "$tmp/pinned"
# The competing load on node 2's core (a plain process: a CPU load needs no network namespace, and
# killing it must not leave the loop behind a wrapper). Every loop ends when this script does, even
# killed with -9 (it checks that the script is alive).
load() { taskset -c 1 sh -c "while kill -0 $$ 2>/dev/null; do :; done" & busy=$!; }

# train NAME NODES [ARGS...]: on nodes 1..NODES (NODES < nodes: the first ones, or "solo K": node K alone).
train() {
  local name=$1 where=$2
  shift 2
  local first=1 np=$where
  if [[ $where == solo* ]]; then first=${where#solo } np=1; fi
  local hosts
  hosts=$(sed -n "${first},$((first + np - 1))p" "$VC_HOSTFILE" | paste -sd, | sed 's/ slots=1//g')
  vc_exec "$first" "${VC_MPIRUN[@]}" -np "$np" --host "$hosts" "$tmp/pinned" train --config "$tmp/model.yaml" \
    --data "$tmp/data.h5" --run-dir "$tmp/$name" "$@" >"$tmp/$name.out" 2>&1 ||
    { tail -30 "$tmp/$name.out"; fail "train $name exited"; }
}
# rate NAME FROM TO: mean samples/s of the logged intervals ending after step FROM and up to TO.
rate() {
  /usr/bin/python3 - "$tmp/$1/metrics.csv" "$2" "$3" <<'PY'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["name"] == "train/samples_per_s"]
v = [float(r["value"]) for r in rows if int(sys.argv[2]) < int(r["step"]) <= int(sys.argv[3])]
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

steps=15
if [[ $mode == two ]]; then
  load
  train solo1 "solo 1" --set train.steps=$steps
  train solo2 "solo 2" --set train.steps=$steps
  train even 2 --set train.steps=$steps
  train balanced 2 --set train.steps=25 --set train.balance=auto
  stop_busy
  s1=$(rate solo1 5 $steps) s2=$(rate solo2 5 $steps) even=$(rate even 5 $steps) bal=$(rate balanced 10 25)
  grep "batch shares at" "$tmp/balanced.out" | sed 's/.*\] //'
  solo=$(/usr/bin/python3 -c "print(f'{$s1 + $s2:.2f}')")
  echo "figures: solo node 1 $s1, solo node 2 (loaded) $s2, sum $solo samples/s"
  # A node slowed mid-run and freed again: no load until step 11, loaded until step 31, free to 50.
  (
    wait_for shift 11 || exit 1
    taskset -c 1 sh -c "while kill -0 $$ 2>/dev/null; do :; done" &
    loop=$!
    wait_for shift 31
    kill $loop
  ) &
  driver=$!
  train shift 2 --set train.steps=50 --set train.balance=auto
  wait $driver || fail "the load was not started"
  # (Logged steps: 1, 6, 11, ...; windows end at 5, 10, ...) Absorbed: node 1 takes at least 58 %
  # (about 2:1 at half speed) by step 26, 2 windows after the load began. Recovered: by step 50 node
  # 1's share fell back by 5 points at least, to within 10 of even. (Not against the shares before the
  # load: the first windows are noisy, one run started at 40/60 with no load.)
  unloaded=$(shares_at shift 11) loaded=$(shares_at shift 26) freed=$(shares_at shift 50)
  echo "shares, load after step 11 to step 31: step 11 $unloaded, step 26 $loaded, step 31 $(shares_at shift 31), step 50 $freed"
  grep "batch shares at" "$tmp/shift.out" | sed 's/.*\] //'
  [[ ${loaded%%/*} -ge 58 ]] || fail "the slow node was not absorbed by step 26 (shares $loaded %, node 1 first)"
  ((${freed%%/*} <= ${loaded%%/*} - 5 && ${freed%%/*} >= 40 && ${freed%%/*} <= 60)) ||
    fail "the recovered node did not get its share back by step 50 (shares $freed %, $loaded % under the load)"
else
  train solo1 "solo 1" --set train.steps=$steps
  # Node 2 alone beside what node 3 takes of core 1: a busy loop in node 3's cgroup.
  sh -c "echo \$\$ >$cg/meridian-vc$id-n3/tasks && exec taskset -c 1 sh -c 'while kill -0 $$ 2>/dev/null; do :; done'" &
  busy=$!
  train solo2 "solo 2" --set train.steps=$steps
  stop_busy
  train solo3 "solo 3" --set train.steps=$steps
  train even 3 --set train.steps=$steps
  train balanced 3 --set train.steps=30 --set train.balance=auto
  s1=$(rate solo1 5 $steps) s2=$(rate solo2 5 $steps) s3=$(rate solo3 5 $steps) even=$(rate even 5 $steps)
  bal=$(rate balanced 10 30)
  grep "batch shares at" "$tmp/balanced.out" | sed 's/.*\] //'
  solo=$(/usr/bin/python3 -c "print(f'{$s1 + $s2 + $s3:.2f}')")
  echo "figures: solo nodes $s1, $s2 (beside a third of a core's load), $s3 (a third of a core), sum $solo samples/s"
fi
# Printed, not asserted: the throughput against the issue's goal (a fraction of the solo sum) and
# against the even split. On this 2-core VM neither holds in every run: the balanced run is steady
# (607-616 samples/s) but node 1's solo speed varies by 19 % and the even split by 14 % (478-544)
# from run to run, so the goal was met in 4 of 7 runs and 1.15x the even split in 10 of 11.
/usr/bin/python3 - "$even" "$bal" "$solo" "$goal" <<'PY'
import sys
even, bal, solo, goal = map(float, sys.argv[1:])
print(f"figures: even split {even:.2f} samples/s = {100 * even / solo:.0f} % of the solo sum; "
      f"balanced {bal:.2f} = {100 * bal / solo:.0f} % (goal {100 * goal:.0f} %: "
      f"{'met' if bal >= goal * solo else 'not met'}), {bal / even:.2f}x the even split")
PY
echo "PASS ($mode)"
