#!/usr/bin/env bash
# Usage: doctor_cluster_test.sh MERIDIAN SOURCE_DIR MODE — `meridian info` and `meridian doctor` across 3
# virtual nodes (tests/cluster/vcluster.sh: network namespaces, TCP only), one rank each.
# MODE speed (its verdicts measure speeds: run alone):
#  1. a healthy cluster: doctor reports every node and every pair, no WARN or FAIL but the 3 nodes'
#     cores line where this machine has fewer cores than 3 (oversubscribed: MPI waits yield) (Open MPI's own
#     variables on the remote nodes are not "differences"), exit 0;
#  2. node 3's link throttled to a tenth of the others' (100 vs 1000 Mbit/s): a WARN naming node 3;
# MODE config (no timing: beside other tests):
#  0. info lists 3 nodes, and their ranks as sharing this machine's cores;
#  3. node 3's interface named ens5 while the job selects eth0 for NCCL (Open MPI by subnet): a FAIL
#     naming node 3 and the variable, exit 1;
#  4. node 3 cannot resolve node 2's name: a FAIL naming both, exit 1.
# MODE all: both. Exit 77 (skipped) when not root or network namespaces cannot be made.
set -u
meridian=$(realpath "$1") mode=${3:-all}  # SOURCE_DIR (the second argument) unused
case $mode in
  speed) id=204 ;;
  config) id=215 ;;
  all) id=216 ;;
  *) echo "unknown mode '$mode' (speed, config or all)"; exit 1 ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/cluster/vcluster.sh
source "$here/vcluster.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail() { echo "FAIL: $*"; [[ -f $VC_DIR/o ]] && cat "$VC_DIR/o"; exit 1; }
vc_up "$id" 3 1gbit
n1=$(vc_node 1) n2=$(vc_node 2) n3=$(vc_node 3)
mkdir -p "$VC_DIR/run"

# doctor EXPECTED_EXIT WHAT [mpirun options]: doctor on the 3 nodes, its report in $VC_DIR/o.
doctor() {
  local want=$1 what=$2
  shift 2
  vc_mpirun -np 3 "$@" "$meridian" doctor --run-dir "$VC_DIR/run" --p2p-bytes 1M --allreduce-bytes 4M \
    --comm-timeout 60 >"$VC_DIR/o" 2>&1
  local rc=$?
  grep -E '^(OK|WARN|FAIL) ' "$VC_DIR/o" | sed "s/^/  [$what] /"
  ((rc == want)) || fail "$what: doctor exited $rc, expected $want"
}

if [[ $mode != config ]]; then
# 1. Healthy.
doctor 0 healthy -x NCCL_SOCKET_IFNAME=eth0
# This machine's 2 cores hold the 3 nodes' ranks: each node's cores line says so (oversubscribed, and
# how MPI waits there), and nothing else warns.
grep -E '^(WARN|FAIL) ' "$VC_DIR/o" | grep -vE "^WARN +cores +c[0-9]+n[1-3]: .*: oversubscribed: 3 ranks of the job on this machine's [0-9]+ cores \(other nodes share it\); MPI waits" &&
  fail "healthy cluster: a WARN or FAIL"
[[ $(grep -cE "^WARN +cores .*oversubscribed" "$VC_DIR/o") == 3 ]] || (($(nproc) >= 3)) ||
  fail "healthy cluster: the nodes sharing this machine's $(nproc) cores are not named oversubscribed"
for n in "$n1" "$n2" "$n3"; do grep -qE "^OK +interfaces +$n: resolves to $(vc_addr "${n##*n}")" "$VC_DIR/o" || fail "healthy: no interfaces line for $n"; done
for pair in "$n1 r0 <-> $n2 r1" "$n1 r0 <-> $n3 r2" "$n2 r1 <-> $n3 r2"; do
  grep -qF "$pair" "$VC_DIR/o" || fail "healthy: no p2p line for $pair"
done

# 2. Node 3's link at a tenth of the others'.
vc_rate 3 100mbit
doctor 0 "slow link"
grep -qE "^WARN +slow rank +rank 2 \($n3\)" "$VC_DIR/o" || fail "slow link: no WARN naming rank 2 ($n3)"
grep -E "^WARN +slow rank" "$VC_DIR/o" | grep -qvE "\($n3\)" && fail "slow link: a WARN names another node"
vc_rate 3 1gbit
fi

if [[ $mode != speed ]]; then
# 0. info.
# Without OMP_NUM_THREADS (ctest sets 1 for the tests that share the cores): info chooses the threads.
(unset OMP_NUM_THREADS; vc_mpirun -np 3 "$meridian" info) >"$VC_DIR/o" 2>&1 || fail "info exited $?"
for n in "$n1" "$n2" "$n3"; do grep -q "$n" "$VC_DIR/o" || fail "info does not list $n"; done
grep -qE '3 nodes?' "$VC_DIR/o" || fail "info does not count 3 nodes"
# 3 nodes on this machine's cores: one kernel (boot id), so its cores split over all 3 ranks, whatever MPI's node count says.
[[ $(grep -cE "^rank [0-2] threads [0-9]+: [0-9]+ cores on this machine for 3 ranks of the job \(ranks of other nodes share this machine: the same kernel boot id\)" "$VC_DIR/o") -eq 3 ]] ||
  { cat "$VC_DIR/o"; fail "info: the 3 nodes' ranks are not seen as sharing one machine"; }

# 3. Node 3's NIC has another name; Open MPI goes by subnet, NCCL by name.
vc_rename_iface 3 ens5
VC_MPI_IFACE=198.18.$VC_ID.0/24 doctor 1 "interface name" -x NCCL_SOCKET_IFNAME=eth0
grep -qE "^FAIL +interfaces +$n3: NCCL_SOCKET_IFNAME=eth0 selects none of its interfaces \(ens5 $(vc_addr 3)\)" "$VC_DIR/o" ||
  fail "interface name: no FAIL naming $n3"
[[ $(grep -cE '^FAIL ' "$VC_DIR/o") == 1 ]] || fail "interface name: other FAILs than node 3's"
vc_rename_iface 3 eth0

# 4. Node 3 cannot resolve node 2.
sed -i "/ $n2\$/d" "/etc/netns/$n3/hosts"
doctor 1 "name resolution"
grep -qE "^FAIL +interfaces +$n3: cannot resolve $n2 \(" "$VC_DIR/o" || fail "name resolution: no FAIL naming $n3 and $n2"
[[ $(grep -cE '^FAIL ' "$VC_DIR/o") == 1 ]] || fail "name resolution: other FAILs than node 3's"
fi
echo "PASS"
