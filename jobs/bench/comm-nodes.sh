#!/usr/bin/env bash
# Float32 sum all-reduce across nodes of the virtual cluster (tests/cluster/vcluster.sh; root): meridian's
# communicator (`bench comm`: its ring for large sums), one plain MPI_Allreduce call (Open MPI's own
# algorithm, with meridian's btl_tcp_links=2) and PyTorch's gloo (jobs/bench/gloo_allreduce.py), one
# rank per node. Prints a markdown table of bus bandwidths (GB/s) per node count and message size.
# Usage: jobs/bench/comm-nodes.sh [--nodes "2 3"] [--rate 1gbit|none] [--sizes 1M,4M,16M] [--build DIR]
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/jobs/python-env.sh"
nodes="2 3" rate=1gbit sizes=1M,4M,16M build=$root/build
while (($#)); do
  case $1 in
    --nodes) nodes=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "comm-nodes.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
meridian=$build/meridian python=${PYTHON:-python3}
[[ -x $meridian ]] || { echo "comm-nodes.sh: $meridian not found; build first" >&2; exit 2; }
"$python" -c 'import torch.distributed' 2>/dev/null || { echo "comm-nodes.sh: $python has no torch" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
bytes() { numfmt --from=iec "$1"; }
max=0
for n in $nodes; do ((n > max)) && max=$n; done
# shellcheck source=tests/cluster/vcluster.sh
source "$root/tests/cluster/vcluster.sh"
vc_up 238 "$max" "$([[ $rate == none ]] || echo "$rate")"
vc_mpirun_cmd
echo "| nodes | bytes | meridian busbw | one MPI_Allreduce busbw | gloo busbw | meridian / gloo |"
echo "|---:|---:|---:|---:|---:|---:|"
for n in $nodes; do
  list=$(for s in ${sizes//,/ }; do bytes "$s"; done | paste -sd,)
  declare -A mer=() mpi=() gloo=()
  for s in ${sizes//,/ }; do
    b=$(bytes "$s")
    out=$(vc_exec 1 "${VC_MPIRUN[@]}" -np "$n" "$meridian" bench comm --min-bytes "$b" --max-bytes "$b" 2>&1)
    read -r mer[$b] mpi[$b] < <(awk '$1 == "allreduce" { print $8, $11 }' <<<"$out")
  done
  port=$((29500 + RANDOM % 1000)) pids=()
  for ((r = 0; r < n; r++)); do
    vc_exec $((r + 1)) env RANK=$r WORLD_SIZE="$n" MASTER_ADDR="$(vc_addr 1)" MASTER_PORT=$port GLOO_SOCKET_IFNAME=eth0 \
      "$python" "$root/jobs/bench/gloo_allreduce.py" --sizes "$list" >"$VC_DIR/gloo.$r.log" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
  while read -r _ _ b _ bw; do gloo[$b]=$bw; done < <(grep '^gloo allreduce' "$VC_DIR/gloo.0.log")
  for b in ${list//,/ }; do
    g=${gloo[$b]:-failed}
    echo "| $n | $b | ${mer[$b]:-failed} | ${mpi[$b]:-failed} | $g |" \
      "$(awk -v a="${mer[$b]:-0}" -v b="$g" 'BEGIN { if (b + 0 > 0) printf "%.2f", a / b; else print "-" }') |"
  done
done
echo
echo "(float32 sum, one rank per node, links $rate; busbw = bytes x 2 (n-1)/n / time, GB/s)"
