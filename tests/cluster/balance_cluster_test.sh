#!/usr/bin/env bash
# Usage: balance_cluster_test.sh MERIDIAN SOURCE_DIR MODE — train.balance auto across virtual nodes
# (tests/cluster/vcluster.sh, links at 1 Gbit/s), one rank per node, each pinned to a core, a small
# SigLIP whose step computes far more than it communicates. Throughput is the mean samples/s of the
# step log's intervals once the shares have settled (metrics.csv), against the sum of the nodes'
# solo speeds measured under the same load (each node alone, 1 rank, the same batch per rank):
#   two     2 nodes; a busy loop pinned to node 2's core (another tenant: about half speed).
#           Balanced: >= 90 % of the solo sum (the even split is printed, about 67 %). In the same
#           balanced run the loop starts only after step 11 and stops after step 41: the shares move
#           to node 1 within 2 windows of the start, and back to even within 2 windows of the stop.
#   three   3 nodes on 2 cores: CPU quotas (cgroup cpu.cfs_quota_us) give nodes 1 and 2 0.6 of a core
#           each and node 3 0.2 (a third of their speed; busy loops cannot make three full-speed nodes
#           out of two cores). Balanced: >= 85 % of the solo sum (the even split is printed).
# Prints "figures: ..." lines for docs/performance.md. Exit 77 (skipped) when not root or network
# namespaces cannot be made.
set -u
meridian=$(realpath "$1") src=$(realpath "$2") mode=$3
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/cluster/vcluster.sh
source "$here/vcluster.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
case $mode in
  two) id=220 nodes=2 bar=0.90 ;;
  three) id=221 nodes=3 bar=0.85 ;;
  *) echo "unknown mode '$mode'"; exit 1 ;;
esac
busy=
cgroups=()
stop_busy() { [[ -n $busy ]] && { kill "$busy" 2>/dev/null; wait "$busy" 2>/dev/null; }; busy=; }
cleanup() {
  stop_busy
  for g in "${cgroups[@]}"; do
    [[ -d $g ]] && { cat "$g/tasks" >/sys/fs/cgroup/cpu/tasks 2>/dev/null; rmdir "$g" 2>/dev/null; }
  done
  vc_down
}
fail() { cleanup; echo "FAIL ($mode): $*"; exit 1; }
vc_up "$id" $nodes 1gbit
trap cleanup EXIT
vc_mpirun_cmd
tmp=$VC_DIR
"$meridian" prep synthetic --count 512 --size 32 --vocab-size 300 --context-length 16 --out "$tmp/data.h5" \
  --log-level warn >/dev/null || fail "prep exited $?"
cat >"$tmp/model.yaml" <<YAML
model:
  image_size: 32
  patch: 4
  vision: {width: 96, depth: 2, heads: 4, mlp_ratio: 4}
  context_length: 16
  vocab_size: 300
  text: {width: 64, depth: 1, heads: 2, mlp_ratio: 4}
  embed: 64
train: {batch: 24, log_every: 5, health_every: 0, balance_every: 5}
optim: {lr: 1.0e-3, warmup: 3}
YAML

# Each node's rank pinned to a core (node 1: core 0; the others: core 1), in its node's CPU cgroup
# where MODE three gives quotas.
quota() { echo "-1"; }
if [[ $mode == three ]]; then
  [[ -w /sys/fs/cgroup/cpu/tasks ]] || vc_skip "no cgroup-v1 cpu controller at /sys/fs/cgroup/cpu"
  quota() { case $1 in 3) echo 20000 ;; *) echo 60000 ;; esac; }  # of every 100000 us
fi
for ((k = 1; k <= nodes; k++)); do
  g=/sys/fs/cgroup/cpu/meridian-vc$id-n$k
  mkdir -p "$g" 2>/dev/null && cgroups+=("$g") || [[ $mode != three ]] || vc_skip "cannot make cgroup $g"
  [[ -d $g ]] && { echo 100000 >"$g/cpu.cfs_period_us"; echo "$(quota $k)" >"$g/cpu.cfs_quota_us"; }
done
cat >"$tmp/pinned" <<PIN
#!/bin/bash
k=\$(hostname | sed 's/.*n//')
g=/sys/fs/cgroup/cpu/meridian-vc$id-n\$k
[[ -d \$g ]] && echo \$\$ >"\$g/tasks"
core=1
[[ \$k == 1 ]] && core=0
[[ $mode == three && \$k == 3 ]] && core=0
exec taskset -c \$core "$meridian" "\$@"
PIN
chmod +x "$tmp/pinned"
load() { vc_exec 2 taskset -c 1 sh -c 'while :; do :; done' & busy=$!; }

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
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["name"] == "samples_per_s"]
v = [float(r["value"]) for r in rows if int(sys.argv[2]) < int(r["step"]) <= int(sys.argv[3])]
print(f"{sum(v) / len(v):.2f}" if v else "nan")
PY
}
shares_at() { grep -oE "step +$2/[0-9]+ .*shares [0-9/]+ %" "$tmp/$1.out" | grep -oE "shares [0-9/]+" | cut -d' ' -f2; }

steps=30
solo_sum=0
if [[ $mode == two ]]; then
  load
  train solo1 "solo 1" --set train.steps=$steps
  train solo2 "solo 2" --set train.steps=$steps
  train even 2 --set train.steps=$steps
  stop_busy
  s1=$(rate solo1 5 $steps) s2=$(rate solo2 5 $steps) even=$(rate even 5 $steps)
  # Balanced: no load until step 10, loaded until step 40, free again to step 60.
  (
    for _ in $(seq 1 6000); do
      grep -q "step  *11/60" "$tmp/balanced.out" 2>/dev/null && break
      sleep 0.02
    done
    vc_exec 2 taskset -c 1 sh -c 'while :; do :; done' &
    loop=$!
    for _ in $(seq 1 6000); do
      grep -q "step  *41/60" "$tmp/balanced.out" 2>/dev/null && break
      sleep 0.02
    done
    kill $loop
  ) &
  driver=$!
  train balanced 2 --set train.steps=60 --set train.balance=auto
  wait $driver
  # (Logged steps: 1, 6, 11, ...; windows end at 5, 10, ...) Absorbed within 2 windows of the load
  # (after step 11, by step 25), measured over steps 26-41.
  bal=$(rate balanced 26 41)
  loaded=$(shares_at balanced 26) freed=$(shares_at balanced 60)
  echo "shares: step 11 $(shares_at balanced 11), step 26 $loaded, step 41 $(shares_at balanced 41), step 60 $freed"
  grep "batch shares at" "$tmp/balanced.out" | sed 's/.*\] //'
  [[ ${loaded%%/*} -ge 60 ]] || fail "the slow node was not absorbed by step 26 (shares $loaded %, node 1 first)"
  [[ ${freed%%/*} -le 55 ]] || fail "the recovered node did not get its share back by step 60 (shares $freed %)"
  solo=$(/usr/bin/python3 -c "print(f'{$s1 + $s2:.2f}')")
  echo "figures: solo node 1 $s1, solo node 2 (loaded) $s2, sum $solo samples/s"
else
  for k in 1 2 3; do train solo$k "solo $k" --set train.steps=$steps; done
  train even 3 --set train.steps=$steps
  train balanced 3 --set train.steps=40 --set train.balance=auto
  s1=$(rate solo1 5 $steps) s2=$(rate solo2 5 $steps) s3=$(rate solo3 5 $steps) even=$(rate even 5 $steps)
  bal=$(rate balanced 15 40)
  grep "batch shares at" "$tmp/balanced.out" | sed 's/.*\] //'
  solo=$(/usr/bin/python3 -c "print(f'{$s1 + $s2 + $s3:.2f}')")
  echo "figures: solo nodes $s1, $s2, $s3 (quota 0.6, 0.6, 0.2 of a core), sum $solo samples/s"
fi
/usr/bin/python3 - "$even" "$bal" "$solo" "$bar" <<'PY' || fail "balanced throughput below the bar"
import sys
even, bal, solo, bar = map(float, sys.argv[1:])
print(f"figures: even split {even:.2f} samples/s = {100 * even / solo:.0f} % of the solo sum; "
      f"balanced {bal:.2f} = {100 * bal / solo:.0f} % (bar {100 * bar:.0f} %)")
sys.exit(0 if bal >= bar * solo else 1)
PY
echo "PASS ($mode)"
