# shellcheck shell=bash
# A virtual cluster on this machine: N "nodes", each a network namespace with its own eth0 (a veth
# pair on a bridge), address in 198.18.0.0/15 (the benchmarking range), hosts file, host name (a
# UTS namespace per command) and local scratch directory (its TMPDIR). The nodes share the
# filesystem (the NFS of a real cluster) and the cores. Open MPI reaches them through an rsh agent
# (the ssh of a real cluster), so `vc_mpirun` is what `mpirun --hostfile` is on a VM cluster.
#
# Source it, then:
#   vc_up ID N [RATE]    nodes c<ID>n1..c<ID>nN on subnet 198.18.ID.0/24 (ID 1..250, one per test,
#                        so tests never share a namespace); RATE (e.g. 1gbit) limits every link.
#                        With VC_MGMT=1 the agent reaches a node even when its link is down (a
#                        separate management network); else, like ssh, only over the link.
#                        Exits 77 (skipped, and says so) when not root or namespaces can't be made.
#   vc_node K            the name of node K (also its host name and namespace)
#   vc_addr K            its address
#   vc_exec K CMD...     runs CMD on node K (its namespace, host name and TMPDIR)
#   vc_mpirun ARGS...    mpirun started on node 1 with the hostfile ($VC_HOSTFILE), TCP only over
#                        eth0 (or $VC_MPI_IFACE: a name or a subnet), one slot per node, --bind-to none,
#                        mpi_yield_when_idle (every node's rank shares these 2 cores: a rank that
#                        spins while waiting would starve the others, which real nodes don't);
#                        vc_mpirun_cmd sets VC_MPIRUN to that command line (to run under a wrapper)
#   vc_rate K RATE|none  limits (or frees) node K's link, both directions (tc tbf)
#   vc_link K up|down    connects or cuts node K (a partition)
#   vc_kill_node K       kills every process on node K (SIGKILL): the node is lost (with
#                        vc_link K down also unreachable, as a VM that died)
#   vc_rename_iface K N  renames node K's eth0 to N (a VM whose NIC has another name)
#   vc_pids [K]          processes running on every node (or node K)
#   vc_down              kills what runs on the nodes and removes namespaces, links, bridge and
#                        files; idempotent, and run by an EXIT trap that vc_up installs
#                        (VC_KEEP=1 keeps $VC_DIR: logs and run directories, to look at a failure)
# $VC_DIR holds the hostfile, the agent, hosts files and each node's local/ scratch directory.
vc_node() { echo "c${VC_ID}n$1"; }
vc_addr() { echo "198.18.$VC_ID.$1"; }
vc_ns_exists() { ip netns list 2>/dev/null | grep -qw "$1"; }

vc_skip() {
  echo "SKIPPED: $* (the virtual cluster needs root and network namespaces); this test did NOT run"
  exit 77
}

vc_up() {
  VC_ID=$1 VC_N=$2
  local rate=${3:-}
  [[ $VC_ID =~ ^[0-9]+$ ]] && ((VC_ID >= 1 && VC_ID <= 250)) || { echo "vc_up: ID must be 1..250" >&2; exit 1; }
  export PATH=$PATH:/usr/sbin:/sbin
  [[ $(id -u) == 0 ]] || vc_skip "not root"
  for tool in ip tc unshare mpirun; do command -v $tool >/dev/null || vc_skip "$tool not found"; done
  VC_BRIDGE=mbr$VC_ID
  VC_DIR=/tmp/meridian-vc$VC_ID
  vc_down  # what a killed earlier run of this test left
  trap vc_down EXIT
  rm -rf "$VC_DIR" && mkdir -p "$VC_DIR" || exit 1
  ip link add "$VC_BRIDGE" type bridge 2>/dev/null || vc_skip "cannot create a bridge (ip link add type bridge)"
  ip link set "$VC_BRIDGE" up
  local k node
  : >"$VC_DIR/hosts"
  for ((k = 1; k <= VC_N; k++)); do echo "$(vc_addr "$k") $(vc_node "$k")" >>"$VC_DIR/hosts"; done
  : >"$VC_DIR/hostfile"
  for ((k = 1; k <= VC_N; k++)); do
    node=$(vc_node "$k")
    ip netns add "$node" || vc_skip "cannot create network namespace $node"
    ip link add "v$node" type veth peer name eth0 netns "$node" || vc_skip "cannot create a veth pair"
    ip link set "v$node" master "$VC_BRIDGE" up
    ip -n "$node" addr add "$(vc_addr "$k")/24" dev eth0
    ip -n "$node" link set eth0 up
    ip -n "$node" link set lo up
    mkdir -p "/etc/netns/$node" "$VC_DIR/$node/local"
    { echo "127.0.0.1 localhost"; cat "$VC_DIR/hosts"; } >"/etc/netns/$node/hosts"
    echo "$node slots=1" >>"$VC_DIR/hostfile"
    [[ -n $rate ]] && vc_rate "$k" "$rate"
  done
  # The rsh agent: Open MPI calls it as `AGENT [ssh options] HOST COMMAND...`. Like ssh, it fails
  # when the host cannot be reached over the network from where it runs (not with VC_MGMT=1).
  local reach='ping -c1 -W2 "$host" >/dev/null 2>&1 || { echo "ssh: connect to host $host port 22: No route to host" >&2; exit 255; }'
  [[ ${VC_MGMT:-0} == 1 ]] && reach=
  cat >"$VC_DIR/agent" <<AGENT
#!/bin/bash
while [[ \$1 == -* ]]; do shift; done
host=\$1; shift
$reach
exec ip netns exec "\$host" unshare --uts sh -c "hostname \$host; export TMPDIR=$VC_DIR/\$host/local; \$*"
AGENT
  chmod +x "$VC_DIR/agent"
  VC_HOSTFILE=$VC_DIR/hostfile
  # Everyone reaches everyone (the bridge may take a moment to forward).
  for ((k = 2; k <= VC_N; k++)); do
    local ok=0
    for _ in $(seq 1 50); do vc_exec 1 ping -c1 -W1 "$(vc_node "$k")" >/dev/null 2>&1 && { ok=1; break; }; sleep 0.1; done
    ((ok)) || { echo "vc_up: node 1 cannot ping $(vc_node "$k")" >&2; exit 1; }
  done
}

vc_exec() {
  local node
  node=$(vc_node "$1")
  shift
  ip netns exec "$node" unshare --uts env TMPDIR="$VC_DIR/$node/local" sh -c 'hostname "$0"; exec "$@"' "$node" "$@"
}

# The mpirun command line of the cluster (run it on node 1: vc_exec 1 "${VC_MPIRUN[@]}" ...).
vc_mpirun_cmd() {
  VC_MPIRUN=(mpirun --hostfile "$VC_HOSTFILE" --mca plm_rsh_agent "$VC_DIR/agent"
    --mca btl self,tcp --mca btl_tcp_if_include "${VC_MPI_IFACE:-eth0}" --mca oob_tcp_if_include "${VC_MPI_IFACE:-eth0}"
    --bind-to none --mca mpi_yield_when_idle 1)
}

vc_mpirun() {
  vc_mpirun_cmd
  vc_exec 1 "${VC_MPIRUN[@]}" "$@"
}

vc_iface() { local v=VC_IF_$1; echo "${!v:-eth0}"; }

vc_rename_iface() {
  local node
  node=$(vc_node "$1")
  ip -n "$node" link set "$(vc_iface "$1")" down && ip -n "$node" link set "$(vc_iface "$1")" name "$2" &&
    ip -n "$node" link set "$2" up && ip -n "$node" addr replace "$(vc_addr "$1")/24" dev "$2"
  printf -v "VC_IF_$1" %s "$2"
}

vc_rate() {
  local node iface
  node=$(vc_node "$1")
  iface=$(vc_iface "$1")
  ip netns exec "$node" tc qdisc del dev "$iface" root 2>/dev/null
  tc qdisc del dev "v$node" root 2>/dev/null
  [[ $2 == none ]] && return 0
  ip netns exec "$node" tc qdisc add dev "$iface" root tbf rate "$2" burst 256kb latency 20ms &&
    tc qdisc add dev "v$node" root tbf rate "$2" burst 256kb latency 20ms
}

vc_link() { ip -n "$(vc_node "$1")" link set "$(vc_iface "$1")" "$2"; }

vc_pids() {
  local k from=1 to=${VC_N:-0}
  [[ -n ${1:-} ]] && from=$1 to=$1
  for ((k = from; k <= to; k++)); do
    vc_ns_exists "$(vc_node "$k")" && ip netns pids "$(vc_node "$k")" 2>/dev/null
  done
}

vc_kill_node() {
  local pids
  pids=$(vc_pids "$1")
  [[ -n $pids ]] && kill -9 $pids 2>/dev/null
  return 0
}

vc_down() {
  [[ -n ${VC_ID:-} ]] || return 0
  local node k
  for node in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^c${VC_ID}n[0-9]+$"); do
    for _ in 1 2 3; do
      pids=$(ip netns pids "$node" 2>/dev/null)
      [[ -z $pids ]] && break
      kill -9 $pids 2>/dev/null
      sleep 0.2
    done
    ip netns del "$node" 2>/dev/null
    ip link del "v$node" 2>/dev/null
    rm -rf "/etc/netns/$node"
  done
  for ((k = 1; k <= 16; k++)); do ip link del "vc${VC_ID}n$k" 2>/dev/null; done
  ip link del "mbr$VC_ID" 2>/dev/null
  # VC_KEEP=1 keeps the logs and run directories for a look after a failure.
  [[ ${VC_KEEP:-0} == 1 ]] || rm -rf "/tmp/meridian-vc$VC_ID"
  return 0
}
