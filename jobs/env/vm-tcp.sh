# shellcheck shell=bash
# Network settings for virtualised clusters without InfiniBand: VMs (e.g. VMware ESXi with GPUs
# passed through) that reach each other over TCP only. Source it before launching, the same on
# every node:  jobs/mpirun/train.sh --env jobs/env/vm-tcp.sh ...   or   ENV_FILE=jobs/env/vm-tcp.sh sbatch ...
# Values already set in the environment win over the defaults below (except the interface ones).
#
# Set first: the interface the nodes talk to each other over (`ip -br addr` on a node lists them):
#   MERIDIAN_IFACE=ens192       a name (or comma list) that exists on every node. When the names
#                               differ between nodes (ens192 here, ens160 there) give NCCL a common
#                               prefix (MERIDIAN_IFACE=ens) and Open MPI the subnet (below).
#   MERIDIAN_MPI_IFACE          for Open MPI only, when it must differ: name(s) or a subnet in CIDR
#                               form (10.1.0.0/24). Default: MERIDIAN_IFACE.
if [[ -z ${MERIDIAN_IFACE:-} ]]; then
  echo "vm-tcp.sh: set MERIDIAN_IFACE to the interface the nodes talk over (see 'ip -br addr'; e.g. MERIDIAN_IFACE=ens192)" >&2
  # shellcheck disable=SC2317  # exit only when run instead of sourced
  return 2 2>/dev/null || exit 2
fi
export MERIDIAN_IFACE
export MERIDIAN_MPI_IFACE=${MERIDIAN_MPI_IFACE:-$MERIDIAN_IFACE}

# ---- NCCL (GPU all-reduce) ----------------------------------------------------------------------
# No InfiniBand/RoCE verbs: NCCL uses its TCP socket transport and does not probe for HCAs.
# Change to 0 only when the VMs have RDMA NICs passed through (SR-IOV ConnectX), with NCCL_IB_HCA.
export NCCL_IB_DISABLE=${NCCL_IB_DISABLE:-1}
# The interface NCCL's sockets use. Unset, NCCL may take docker0, virbr0 or a management NIC that
# other nodes cannot reach (the job then hangs at the first all-reduce or crawls over a slow link).
# A prefix matches every interface starting with it; "=ens192" is an exact match; "^docker,lo" excludes.
export NCCL_SOCKET_IFNAME=$MERIDIAN_IFACE
# IPv4 only: VMs often carry IPv6 link-local addresses on the same NIC, which NCCL may pick and
# other hosts cannot route to. Set AF_INET6 on an IPv6-only network.
export NCCL_SOCKET_FAMILY=${NCCL_SOCKET_FAMILY:-AF_INET}
# Parallel TCP streams per connection (threads x sockets per thread, at most 64). One stream rarely
# fills a 25-100 GbE vNIC (vmxnet3); more cost CPU. Tune with `meridian bench comm` across two
# nodes: try 2x2 on VMs with few cores, 8x4 on fast links.
export NCCL_SOCKET_NTHREADS=${NCCL_SOCKET_NTHREADS:-4}
export NCCL_NSOCKS_PERTHREAD=${NCCL_NSOCKS_PERTHREAD:-4}
# GPU peer-to-peer inside one VM: with GPUs passed through, the VM sees a virtual PCI tree, and
# direct GPU-to-GPU copies may be refused by the hypervisor (IOMMU/ACS) or silently slow. If
# `meridian bench comm` on one VM with several GPUs hangs, errors, or is far below a bare-metal
# figure, disable P2P (copies then go through host memory):
#   export NCCL_P2P_DISABLE=1
# With NVLink bridges passed through and working, leave it enabled (much faster).
# Shared memory between ranks on one VM uses /dev/shm. Containers default to a 64 MB /dev/shm,
# too small for NCCL ("unhandled system error" at start): enlarge it (docker --shm-size=8g), or,
# slower, make NCCL use sockets instead:
#   export NCCL_SHM_DISABLE=1

# ---- Open MPI (bootstrap, CPU collectives, parallel HDF5) ---------------------------------------
# No verbs BTL: without InfiniBand it only prints warnings or fails to start. (Alternatively list
# what to use: OMPI_MCA_btl=self,vader,tcp.)
export OMPI_MCA_btl=${OMPI_MCA_btl:-^openib}
# The ob1 messaging layer over the BTLs above, rather than UCX, which may choose a transport a VM
# does not really have. Remove on clusters where UCX is configured for the fabric.
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
# MPI data (rank-to-rank TCP) only on this interface/subnet. Otherwise Open MPI tries every
# interface, including docker0/virbr0, whose identical addresses on every host make it connect to
# itself or wait forever.
export OMPI_MCA_btl_tcp_if_include=$MERIDIAN_MPI_IFACE
# The control channel between mpirun and its daemons on the other hosts (the rendezvous): same
# reason; a firewall must let TCP through on this interface (or open the ports: oob_tcp_static_ipv4_ports).
export OMPI_MCA_oob_tcp_if_include=$MERIDIAN_MPI_IFACE
# *_if_include and *_if_exclude cannot both be set.
unset OMPI_MCA_btl_tcp_if_exclude OMPI_MCA_oob_tcp_if_exclude
