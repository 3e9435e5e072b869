#!/usr/bin/env bash
# Usage: jobs/bench/ckpt_nodes.sh MERIDIAN [SIZE] [RATE] — collective checkpoint write time against the
# number of tensors and of nodes, on the virtual cluster of tests/cluster/vcluster.sh (root; one rank
# per node, links limited to RATE, default 1gbit), with the same ranks on one host for comparison.
# Prints one table (markdown) of `meridian bench ckpt` write seconds; SIZE (default 16M) is the state
# split into 16, 64, 256 and 1024 tensors.
set -u
meridian=$(realpath "${1:?usage: ckpt_nodes.sh MERIDIAN [SIZE] [RATE]}") size=${2:-16M} rate=${3:-1gbit}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/cluster/vcluster.sh
source "$here/../../tests/cluster/vcluster.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
vc_up 240 3 "$rate"
vc_mpirun_cmd
dir=$VC_DIR/ckpt  # shared by the nodes, as an NFS directory would be
write_s() {  # ranks where -> the write seconds `bench ckpt` reports
  local n=$1 where=$2 t=$3 out
  if [[ $where == host ]]; then
    out=$(mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -np "$n" "$meridian" bench ckpt \
      --size "$size" --tensors "$t" --dir "$dir" --repeat 3 2>&1)
  else
    out=$(vc_exec 1 "${VC_MPIRUN[@]}" -np "$n" "$meridian" bench ckpt --size "$size" --tensors "$t" --dir "$dir" \
      --repeat 3 2>&1)
  fi
  awk '/collective write/{print $3; f=1} END{if(!f) print "failed"}' <<<"$out"
}
echo "| tensors | 2 ranks, one host | 2 nodes | 3 ranks, one host | 3 nodes |"
echo "|---:|---:|---:|---:|---:|"
for t in 16 64 256 1024; do
  echo "| $t | $(write_s 2 host $t) | $(write_s 2 nodes $t) | $(write_s 3 host $t) | $(write_s 3 nodes $t) |"
done
echo "(seconds per collective write of $size float32 incl. checksums and fsync; best of 3; links $rate)"
