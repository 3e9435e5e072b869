#!/usr/bin/env bash
# Usage: jobs/bench/balance-trial.sh MERIDIAN [ROUNDS (default 1)] — train.balance auto as a user
# meets it (issue 57's trial), as root: 2 virtual nodes (tests/cluster/vcluster.sh, links at 1
# Gbit/s), node k's rank pinned to core k-1 with one thread, a busy loop pinned to core 1 (another
# tenant on node 2's core), SigLIP tiny on UCM-Captions at 128 px (jobs/configs/ucm-siglip-tiny.yaml,
# batch 32 per rank, vocabulary 520), `meridian bench train`, 101 steps, the balance settings'
# defaults. Each round, one after the other:
#   1. both nodes alone at once (each a 1-rank job: the solo speeds under the same load), 41 steps;
#   2. the 2-node run with train.balance auto;
#   3. with EVEN=1, the 2-node run with even shares;
#   4. the solos again (the VM's speed drifts between minutes; the two rounds are averaged).
# Environment: RATE (the links' rate, default 1gbit; empty: unlimited), AUTO_ARGS (more options for
# the auto run, e.g. --log-level debug to see every window's decision), EVEN=1, LOOP=0 (no busy
# loop: equal nodes, to see what auto costs where there is nothing to balance).
# Prints, per round, the whole run's throughput (bench train's samples/s: steps 2-101, the slowest
# rank's time) as a share of the solo sum, the longest stretch at one set of shares likewise, and the
# share changes. Writes its dataset and logs to ${TMPDIR:-/tmp}/meridian-balance-trial.
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
meridian=$(realpath "${1:?usage: balance-trial.sh MERIDIAN [ROUNDS]}")
rounds=${2:-1}
source "$src/jobs/python-env.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# shellcheck source=tests/cluster/vcluster.sh
source "$src/tests/cluster/vcluster.sh"
dir=${TMPDIR:-/tmp}/meridian-balance-trial
mkdir -p "$dir"
data=$dir/ucm-train-128.h5
ucm=$src/../shared/data/ucm-captions
if [[ ! -f $data ]]; then
  [[ -f $ucm/captions.jsonl ]] || { echo "balance-trial.sh: no $ucm" >&2; exit 2; }
  mpirun --oversubscribe -np 2 "$meridian" prep image-text --images "$ucm" --captions "$ucm/captions.jsonl" \
    --split train --size 128 --context-length 32 --vocab-size 8000 --out "$data" --log-level warn || exit 1
fi

vc_up 222 2 "${RATE-1gbit}"
vc_mpirun_cmd
loop=
stop_loop() { [[ -n $loop ]] && kill "$loop" 2>/dev/null; wait "$loop" 2>/dev/null; loop=; }
trap 'stop_loop; vc_down' EXIT
cat >"$dir/pinned" <<PIN
#!/bin/bash
k=\$(hostname | sed 's/.*n//')
exec taskset -c \$((k - 1)) "$meridian" "\$@"
PIN
chmod +x "$dir/pinned"
bench=(bench train --config "$src/jobs/configs/ucm-siglip-tiny.yaml" --data "$data" --threads 1
  --set model.vocab_size=520 --set train.log_every=5 --set train.eval_every=0 --set train.health_every=0)

# run NAME NODES STEPS [ARGS...]: bench train on nodes 1..NODES ("solo K": node K alone) into $dir/NAME.out.
run() {
  local name=$1 where=$2 steps=$3 first=1 np=$2
  shift 3
  if [[ $where == solo* ]]; then first=${where#solo } np=1; fi
  local hosts
  hosts=$(sed -n "${first},$((first + np - 1))p" "$VC_HOSTFILE" | paste -sd, | sed 's/ slots=1//g')
  vc_exec "$first" "${VC_MPIRUN[@]}" -np "$np" --host "$hosts" "$dir/pinned" "${bench[@]}" \
    --set train.steps="$steps" "$@" >"$dir/$name.out" 2>&1 || { tail -20 "$dir/$name.out"; exit 1; }
}
rate() { grep -oE "bench train: [0-9]+ ranks, [0-9.]+ samples/s" "$dir/$1.out" | grep -oE "[0-9.]+ samples" | grep -oE "[0-9.]+"; }
solos() {
  run "solo$1_1" "solo 1" 41 &
  local a=$!
  run "solo$1_2" "solo 2" 41
  wait $a || exit 1
}

if [[ ${LOOP:-1} == 1 ]]; then
  taskset -c 1 sh -c 'while :; do :; done' &
  loop=$!
fi
for ((round = 1; round <= rounds; round++)); do
  solos 1
  # shellcheck disable=SC2086
  run auto 2 101 --set train.balance=auto ${AUTO_ARGS:-}
  [[ ${EVEN:-0} == 1 ]] && run even 2 101
  solos 2
  python3 - "$dir" "$(rate solo1_1)" "$(rate solo1_2)" "$(rate solo2_1)" "$(rate solo2_2)" "$(rate auto)" \
    "$([[ ${EVEN:-0} == 1 ]] && rate even || echo nan)" <<'PY' || exit 1
import math, re, sys
d = sys.argv[1]
a1, a2, b1, b2, auto, even = map(float, sys.argv[2:])
s1, s2 = (a1 + b1) / 2, (a2 + b2) / 2
solo = s1 + s2
out = open(f"{d}/auto.out").read()
m = re.search(r"(\d+) share change\(s\) in (\d+) steps \(([0-9.]+) per 100\); the longest stretch at one set of "
              r"shares: steps (\d+)-(\d+), ([0-9.]+) samples/s", out)
shares = re.findall(r"batch shares at step (\d+): rank 0: (\d+) of", out)
# A binary from before the balance line (for a before/after figure): the changes from the log.
changes, steps, per100, first, last, settled = m.groups() if m else (len(shares), 101, len(shares) / 1.01, 0, 0, "nan")
print(f"trial: node 1 alone {a1:.1f} then {b1:.1f}, node 2 alone {a2:.1f} then {b2:.1f}: "
      f"solo sum {solo:.1f} samples/s")
print(f"trial: auto, the whole run {auto:.1f} samples/s = {auto / solo:.3f} of the solo sum; the longest stretch at "
      f"one set of shares (steps {first}-{last}) {float(settled):.1f} = {float(settled) / solo:.3f}; "
      f"{changes} share change(s) in {steps} steps ({per100} per 100), rank 0's share "
      + (", ".join(f"{s} at step {t}" for t, s in shares) or "even throughout"))
if not math.isnan(even):
    print(f"trial: even split {even:.1f} samples/s = {even / solo:.3f} of the solo sum")
PY
done
