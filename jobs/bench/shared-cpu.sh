#!/usr/bin/env bash
# Usage: jobs/bench/shared-cpu.sh MERIDIAN [MERIDIAN_BEFORE] — what a CPU shared with other work costs
# (issue 44), each figure measured with every binary given, alternately, in one run. As root (the
# virtual cluster of tests/cluster/vcluster.sh: 2 network-namespace nodes on this machine's cores).
#  1. lm-tiny, 2 ranks, 40 steps, mean step (ms), DDP and ZeRO-3: one host; 2 virtual nodes with the
#     default threads, with --threads 1, and with OMP_WAIT_POLICY=PASSIVE;
#  2. one rank with the default threads, beside a busy loop pinned to core 0: samples/s as a fraction of
#     the same run without it (and with OMP_WAIT_POLICY=PASSIVE, the other candidate);
#  3. one host, nothing else running: samples/s of SigLIP tiny (128 px) and lm-tiny on 1 rank and on 2,
#     3 rounds alternating the binaries.
# Writes its datasets to ${TMPDIR:-/tmp}/meridian-shared-cpu.
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
source "$src/jobs/python-env.sh"
binaries=("$@")
((${#binaries[@]})) || { sed -n '2,11p' "$0"; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# shellcheck source=tests/cluster/vcluster.sh
source "$src/tests/cluster/vcluster.sh"
dir=${TMPDIR:-/tmp}/meridian-shared-cpu
mkdir -p "$dir"
m=${binaries[0]}
[[ -f $dir/text.h5 ]] || mpirun --oversubscribe -np 2 "$m" prep synthetic --kind text --count 2000 --out "$dir/text.h5" \
  --log-level warn >/dev/null || exit 1
[[ -f $dir/it.h5 ]] || mpirun --oversubscribe -np 2 "$m" prep synthetic --kind image-text --count 512 --size 128 \
  --out "$dir/it.h5" --log-level warn >/dev/null || exit 1
lm=(bench train --config "$src/jobs/configs/lm-tiny.yaml" --data "$dir/text.h5" --set train.steps=40 --log-level warn)
siglip=(bench train --config "$src/jobs/configs/siglip-tiny.yaml" --data "$dir/it.h5" --set model.image_size=128
  --set train.steps=20 --log-level warn)
step_ms() { grep -o "step [0-9.]* ms: data" | grep -o "[0-9.]*" || echo "failed"; }
rate() { grep -oE "bench train: [0-9]+ ranks, [0-9.]+ samples/s" | grep -oE "[0-9.]+ samples" | grep -oE "[0-9.]+" || echo 0; }
ratio() { python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); print(f'{a / b:.2f}' if b else '-')" "$1" "$2"; }

vc_up 240 2
vc_mpirun_cmd
echo "## 1. lm-tiny, 2 ranks, 40 steps: mean step (ms)"
echo "| binary | optim.zero | one host | 2 virtual nodes | --threads 1 | OMP_WAIT_POLICY=PASSIVE |"
echo "|---|---|---:|---:|---:|---:|"
for zero in 0 3; do
  for b in "${binaries[@]}"; do
    host=$(mpirun -np 2 "$b" "${lm[@]}" --set optim.zero=$zero 2>&1 | step_ms)
    nodes=$(vc_exec 1 "${VC_MPIRUN[@]}" -np 2 "$b" "${lm[@]}" --set optim.zero=$zero 2>&1 | step_ms)
    one=$(vc_exec 1 "${VC_MPIRUN[@]}" -np 2 "$b" "${lm[@]}" --set optim.zero=$zero --threads 1 2>&1 | step_ms)
    passive=$(OMP_WAIT_POLICY=PASSIVE vc_exec 1 "${VC_MPIRUN[@]}" -x OMP_WAIT_POLICY -np 2 "$b" "${lm[@]}" \
      --set optim.zero=$zero 2>&1 | step_ms)
    echo "| $b | $zero | $host | $nodes | $one | $passive |"
  done
done
vc_down

echo
echo "## 2. one rank (default threads) beside a busy loop on core 0: samples/s"
echo "| binary | task | alone | beside the loop | fraction | PASSIVE alone | PASSIVE beside | fraction |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
for task in lm siglip; do
  eval "args=(\"\${${task}[@]}\")"
  for b in "${binaries[@]}"; do
    alone=$("$b" "${args[@]}" 2>&1 | rate)
    palone=$(OMP_WAIT_POLICY=PASSIVE "$b" "${args[@]}" 2>&1 | rate)
    taskset -c 0 sh -c 'while :; do :; done' &
    busy=$!
    sleep 0.5
    beside=$("$b" "${args[@]}" 2>&1 | rate)
    pbeside=$(OMP_WAIT_POLICY=PASSIVE "$b" "${args[@]}" 2>&1 | rate)
    kill $busy
    wait $busy 2>/dev/null
    echo "| $b | $task | $alone | $beside | $(ratio "$beside" "$alone") | $palone | $pbeside | $(ratio "$pbeside" "$palone") |"
  done
done

echo
echo "## 3. one host, nothing else running: samples/s, rounds alternating the binaries"
echo "| round | binary | SigLIP 1 rank | SigLIP 2 ranks | lm 1 rank | lm 2 ranks |"
echo "|---|---|---:|---:|---:|---:|"
for round in 1 2 3; do
  for b in "${binaries[@]}"; do
    s1=$("$b" "${siglip[@]}" 2>&1 | rate)
    s2=$(mpirun -np 2 "$b" "${siglip[@]}" 2>&1 | rate)
    l1=$("$b" "${lm[@]}" 2>&1 | rate)
    l2=$(mpirun -np 2 "$b" "${lm[@]}" 2>&1 | rate)
    echo "| $round | $b | $s1 | $s2 | $l1 | $l2 |"
  done
done
