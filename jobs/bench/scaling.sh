#!/usr/bin/env bash
# The scaling table of docs/performance.md: SigLIP tiny (jobs/configs/ucm-siglip-tiny.yaml) trained
# by meridian (`bench train`, float32 gradients and bf16 gradients) and by the idiomatic PyTorch DDP
# reference (jobs/bench/siglip_torch_ref.py, gloo; on 2 or more nodes also with DDP's fp16_compress_hook,
# the reference for bf16 gradients), one rank per node with one thread, batch 32 per
# rank, on 1, 2 and 3 nodes of the virtual cluster (tests/cluster/vcluster.sh: network namespaces,
# TCP over veth, links limited with tc) at each link rate. Prints a markdown table: samples/s, the
# efficiency against one node of the same program, meridian / PyTorch, and meridian's exposed
# communication (share of the step).
#
# Usage (root): jobs/bench/scaling.sh [--steps N] [--nodes "1 2 3"] [--rates "none 10gbit 1gbit"]
#                                     [--data FILE.h5] [--build DIR] [--keep-logs DIR]
# --data: a dataset prepared at 128 px with a vocabulary of at most 520 (default: prepared once from
#         ../shared/data/ucm-captions into $BENCH_DIR, default /tmp/meridian-bench-scaling).
# Needs meridian's Python environment (jobs/setup-node.sh: the same PyTorch as the build) for the reference.
# The nodes share this machine's cores: with more nodes than cores the ranks share them, which
# bounds the efficiency (3 nodes on 2 cores: at most 2/3) for both programs alike.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/jobs/python-env.sh"
steps=30 nodes="1 2 3" rates="none 10gbit 1gbit" data="" build=$root/build logs=""
while (($#)); do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --keep-logs) logs=$2; shift 2 ;;
    *) echo "scaling.sh: unknown argument '$1' (see the usage at the top of $0)" >&2; exit 2 ;;
  esac
done
meridian=$build/meridian
python=${PYTHON:-python3}
[[ -x $meridian ]] || { echo "scaling.sh: $meridian not found; build first" >&2; exit 2; }
"$python" -c 'import torch.distributed' 2>/dev/null ||
  { echo "scaling.sh: $python cannot import torch (jobs/setup-node.sh installs it)" >&2; exit 2; }
max_nodes=0
for n in $nodes; do
  [[ $n =~ ^[1-9]$ ]] || { echo "scaling.sh: --nodes takes numbers 1-9, got '$n'" >&2; exit 2; }
  ((n > max_nodes)) && max_nodes=$n
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
bench=${BENCH_DIR:-/tmp/meridian-bench-scaling}
mkdir -p "$bench"
logs=${logs:-$bench/logs}
mkdir -p "$logs"
if [[ -z $data ]]; then
  data=$bench/ucm-train-128.h5
  ucm=$root/../shared/data/ucm-captions
  [[ -f $ucm/captions.jsonl ]] || { echo "scaling.sh: no --data and no $ucm" >&2; exit 2; }
  [[ -f $data ]] || mpirun --oversubscribe -np 2 "$meridian" prep image-text --images "$ucm" \
    --captions "$ucm/captions.jsonl" --split train --size 128 --context-length 32 --vocab-size 8000 \
    --out "$data" --log-level warn >"$logs/prep.log" 2>&1 ||
    { echo "scaling.sh: prep failed (see $logs/prep.log)" >&2; exit 1; }
fi

# shellcheck source=tests/cluster/vcluster.sh
source "$root/tests/cluster/vcluster.sh"
vc_up 239 "$max_nodes"
vc_mpirun_cmd

# meridian N LOG [--set ...] -> "samples/s exposed%"
run_meridian() {
  local n=$1 log=$2
  shift 2
  vc_exec 1 "${VC_MPIRUN[@]}" -np "$n" "$meridian" bench train --config "$root/jobs/configs/ucm-siglip-tiny.yaml" \
    --data "$data" --threads 1 --set model.vocab_size=520 --set train.steps=$((steps + 1)) \
    --set train.log_every=1000 --set train.eval_every=0 --set train.health_every=0 "$@" >"$log" 2>&1
  awk '/^bench train: [0-9]+ ranks,/ {
         for (i = 1; i <= NF; i++) { if ($(i + 1) == "samples/s") s = $i; if ($i == "comm") c = $(i + 2) }
         gsub(/[()%,]/, "", c); print s, c; found = 1 }
       END { if (!found) print "failed -" }' "$log"
}

# reference N LOG [--fp16-hook] -> samples/s
run_reference() {
  local n=$1 log=$2 r pids=() port=$((29500 + RANDOM % 1000))
  shift 2
  for ((r = 0; r < n; r++)); do
    vc_exec $((r + 1)) env RANK=$r WORLD_SIZE="$n" MASTER_ADDR="$(vc_addr 1)" MASTER_PORT=$port \
      GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 "$python" "$root/jobs/bench/siglip_torch_ref.py" \
      --steps "$steps" --batch 32 --threads 1 "$@" >"$log.rank$r" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
  awk '/^torch_ddp samples\/s/ { print $3; found = 1 } END { if (!found) print "failed" }' "$log.rank0"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-" }'; }
eff() { awk -v a="$1" -v b="$2" -v n="$3" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.0f %%", 100 * a / (n * b); else print "-" }'; }

echo "| nodes | links | meridian float32 (eff.) | meridian bf16 grads (eff.) | PyTorch DDP (eff.) | PyTorch DDP fp16 hook (eff.) | float32 / PyTorch | bf16 grads / PyTorch fp16 hook | exposed comm float32 / bf16 |"
echo "|---:|---|---:|---:|---:|---:|---:|---:|---|"
base_m="" base_t=""
for n in $nodes; do
  for rate in $rates; do
    ((n == 1)) && [[ $rate != "${rates%% *}" ]] && continue  # one node has no link: once
    for ((k = 1; k <= max_nodes; k++)); do vc_rate "$k" "$rate"; done
    tag=n$n-$rate
    read -r m32 c32 < <(run_meridian "$n" "$logs/meridian-$tag-f32.log")
    if ((n > 1)); then
      read -r m16 c16 < <(run_meridian "$n" "$logs/meridian-$tag-bf16.log" --set comm.grad_dtype=bf16)
    else
      m16=- c16=-
    fi
    t=$(run_reference "$n" "$logs/torch-$tag.log")
    if ((n > 1)); then t16=$(run_reference "$n" "$logs/torch-$tag-fp16.log" --fp16-hook); else t16=-; fi
    ((n == 1)) && base_m=$m32 base_t=$t
    link=$([[ $n == 1 ]] && echo "-" || echo "$rate")
    echo "| $n | $link | $m32 ($(eff "$m32" "$base_m" "$n")) | $m16 ($(eff "$m16" "$base_m" "$n")) |" \
      "$t ($(eff "$t" "$base_t" "$n")) | $t16 ($(eff "$t16" "$base_t" "$n")) | $(ratio "$m32" "$t") |" \
      "$(ratio "$m16" "$t16") | $c32 % / $c16 % |"
  done
done
echo
echo "(samples/s over all ranks, $steps timed steps each, batch 32 per rank, one rank and one thread per node;" \
  "efficiency = samples/s / (nodes x the same program's one-node samples/s); logs in $logs)"
