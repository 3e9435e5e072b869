# shellcheck shell=bash
# Diagnostics for a job that hangs at start, fails to connect, or is slower than expected: source it
# after the network settings (e.g. jobs/env/vm-tcp.sh), run once, read the logs, then drop it (it
# slows start-up and writes a lot). With jobs/mpirun/train.sh: --env a file that sources both.
#   MERIDIAN_DEBUG_DIR   where the per-process NCCL logs go (default /tmp; a shared path collects
#                        every node's logs in one place; it must exist on every node)

# NCCL: one line per decision. INIT: ranks, devices, version; NET: the interface and transport
# chosen (look for "NET/Socket : Using [0]ens192:10.1.0.11" and "NET/IB" if InfiniBand was expected);
# ENV: which NCCL_* variables were read. Add GRAPH,TUNING to see the topology and the algorithms,
# or use ALL. Use WARN to keep only problems.
export NCCL_DEBUG=${NCCL_DEBUG:-INFO}
export NCCL_DEBUG_SUBSYS=${NCCL_DEBUG_SUBSYS:-INIT,NET,ENV}
# One file per host (%h) and process (%p) instead of every rank interleaved on stdout.
mkdir -p "${MERIDIAN_DEBUG_DIR:-/tmp}"
export NCCL_DEBUG_FILE=${MERIDIAN_DEBUG_DIR:-/tmp}/nccl.%h.%p.log

# Open MPI: which interfaces and addresses the TCP BTL connects over (a wrong interface shows here),
# and how mpirun starts its daemons on the other hosts (ssh command lines, failures).
export OMPI_MCA_btl_base_verbose=${OMPI_MCA_btl_base_verbose:-30}
export OMPI_MCA_plm_base_verbose=${OMPI_MCA_plm_base_verbose:-5}

# LibTorch: C++ stack traces in error messages.
export TORCH_SHOW_CPP_STACKTRACES=1
