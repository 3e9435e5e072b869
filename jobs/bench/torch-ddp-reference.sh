#!/usr/bin/env bash
# PyTorch DDP (gloo) reference for the SigLIP tiny speed goal on one host: starts the ranks of
# jobs/bench/siglip_torch_ref.py (the model written as PyTorch users write it) by hand (RANK / WORLD_SIZE /
# MASTER_ADDR / MASTER_PORT, as torch.distributed.run would set them), each pinned to one
# core with taskset (as mpirun binds meridian's ranks) and one thread, and prints rank 0's output;
# the last line is `torch_ddp samples/s <global> step_ms <mean> steps <n>`.
# Usage: jobs/bench/torch-ddp-reference.sh [--steps N] [--warmup N] [--batch N] [--threads N] [--vocab N] [--bf16]
# Environment: NP (ranks, default 2), PYTHON (default python3 of meridian's environment: the same PyTorch
#              as meridian's LibTorch),
#              LOG_DIR (other ranks' output, default a temporary directory, kept on failure).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../python-env.sh"
np=${NP:-2}
python=${PYTHON:-python3}
script=$here/siglip_torch_ref.py

if ! "$python" -c 'import torch, torch.distributed' 2>/dev/null; then
  echo "torch-ddp-reference.sh: $python cannot import torch; jobs/setup-node.sh installs meridian's Python" \
       "environment (the same PyTorch as meridian's LibTorch), or set PYTHON" >&2
  exit 2
fi
command -v taskset >/dev/null || { echo "torch-ddp-reference.sh: taskset not found (apt-get install -y util-linux)" >&2; exit 2; }
[[ $np =~ ^[1-9][0-9]*$ ]] || { echo "torch-ddp-reference.sh: NP must be a positive integer" >&2; exit 2; }

port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cores=$(nproc)
(( np > cores )) && echo "torch-ddp-reference.sh: $np ranks on $cores cores: ranks share cores" >&2
logs=${LOG_DIR:-$(mktemp -d /tmp/torch-ddp-reference.XXXXXX)}
mkdir -p "$logs"

pids=()
for ((r = 0; r < np; ++r)); do
  cmd=(env RANK=$r WORLD_SIZE=$np LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port
       OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
       taskset -c $((r % cores)) "$python" "$script" "$@")
  if ((r == 0)); then "${cmd[@]}" 2>&1 & else "${cmd[@]}" > "$logs/rank$r.log" 2>&1 & fi
  pids+=($!)
done

# Wait for every rank; when one fails, stop the others (they would wait in a collective).
status=0
remaining=("${pids[@]}")
while ((${#remaining[@]})); do
  wait -n "${remaining[@]}"
  rc=$?
  still=()
  for p in "${remaining[@]}"; do kill -0 "$p" 2>/dev/null && still+=("$p"); done
  remaining=("${still[@]}")
  if ((rc != 0 && status == 0)); then
    status=$rc
    for p in "${remaining[@]}"; do kill "$p" 2>/dev/null; done
  fi
done
wait

if ((status != 0)); then
  echo "torch-ddp-reference.sh: a rank failed (exit $status); logs in $logs" >&2
  for ((r = 1; r < np; ++r)); do
    [[ -s $logs/rank$r.log ]] && { echo "--- rank $r (last lines)" >&2; tail -n 20 "$logs/rank$r.log" >&2; }
  done
  exit "$status"
fi
[[ -z ${LOG_DIR:-} ]] && rm -rf "$logs"
exit 0
