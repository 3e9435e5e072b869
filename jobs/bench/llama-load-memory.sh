#!/usr/bin/env bash
# Usage: jobs/bench/llama-load-memory.sh MERIDIAN WORKDIR [OLD_MERIDIAN]
# Peak resident memory per rank while a published-layout Llama loads: llama-1b's shapes
# (jobs/configs/llama-1b.yaml, 924M parameters) as a Hugging Face directory in BF16 with 2 shards
# (tests/models/hf_llama.py make --shape), loaded by 2 ranks with ZeRO-3 (`train --init DIR`, one
# step of 16 tokens). Each rank's VmRSS is sampled every 0.1 s; the peak before the first step
# starts (the "memory per rank" log line; ZeRO-3 allocates its optimizer state at the first step,
# after loading) is the loading peak, printed per rank with the file size.
# OLD_MERIDIAN (optional): a binary from before directory loading, given the same weights as one
# .safetensors file (it read the whole file on every rank). Needs meridian's Python environment (torch); ~12 GB of memory.
set -eu
meridian=$1 work=$2 old=${3:-}
src=$(cd "$(dirname "$0")/../.." && pwd)
source "$src/jobs/python-env.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$work"
if [[ ! -f $work/hf/config.json ]]; then
  python3 "$src/tests/models/hf_llama.py" make "$work/hf" --shape 2048,5632,18,32,4,32000 \
    --shard-bytes 1000000000 --dtype bf16
fi
mpirun --oversubscribe -np 2 "$meridian" prep synthetic --kind text --count 64 --tokenizer "$work/hf" \
  --out "$work/text.h5" --overwrite --log-level warn >/dev/null
measure() {  # measure NAME BINARY CONFIG INIT: prints the loading peak and the overall peak per rank
  local name=$1 bin=$2 config=$3 init=$4
  rm -rf "$work/run_$name"
  mpirun --oversubscribe -np 2 "$bin" train --config "$config" --data "$work/text.h5" --init "$init" \
    --run-dir "$work/run_$name" --log-level info >"$work/$name.log" 2>&1 &
  local launcher=$! start="" peak=() all=()
  : >"$work/$name.rss"
  while kill -0 $launcher 2>/dev/null; do
    for pid in $(pgrep -f "$(basename "$bin") train --config $config" | sort -n); do
      [[ $pid == "$launcher" ]] && continue
      awk -v p="$pid" -v t="$(date +%s.%N)" '/^VmRSS/ {print t, p, $2}' "/proc/$pid/status" 2>/dev/null >>"$work/$name.rss" || true
    done
    [[ -z $start ]] && grep -q "memory per rank" "$work/$name.log" && start=$(date +%s.%N) && echo "$start started" >>"$work/$name.rss"
    sleep 0.1
  done
  wait $launcher || { tail -5 "$work/$name.log"; exit 1; }
  python3 - "$work/$name.rss" "$name" <<'PY'
import collections, sys
load, every, started = collections.defaultdict(int), collections.defaultdict(int), None
for line in open(sys.argv[1]):
    f = line.split()
    if f[1] == "started":
        started = float(f[0]); continue
    t, pid, kb = float(f[0]), f[1], int(f[2])
    every[pid] = max(every[pid], kb)
    if started is None: load[pid] = max(load[pid], kb)
for pid in sorted(every, key=int):
    print(f"{sys.argv[2]}: rank process {pid}: loading peak {load[pid] / 2**20:.2f} GiB, run peak {every[pid] / 2**20:.2f} GiB")
PY
}
printf 'task: {name: lm}\ntrain: {batch: 1, steps: 1, health_every: 0, activation_checkpointing: true}\n' >"$work/sft.yaml"
printf 'data: {seq_len: 16}\noptim: {zero: 3, warmup: 1}\ncheckpoint: {at_end: false}\n' >>"$work/sft.yaml"
du -b "$work"/hf/*.safetensors | awk '{s += $1} END {printf "weights: %.2f GiB in BF16\n", s / 2^30}'
measure new "$meridian" "$work/sft.yaml" "$work/hf"
if [[ -n $old ]]; then
  [[ -f $work/one.safetensors ]] || python3 - "$work" "$src" <<'PY'
import sys
sys.path.insert(0, sys.argv[2] + "/tests/models")
from hf_siglip import read_weights, write_safetensors
w = read_weights(sys.argv[1] + "/hf")
write_safetensors(sys.argv[1] + "/one.safetensors", [(k, v) for k, v in w.items() if not k.endswith("inv_freq")])
PY
  # The old binary takes the model from the config: llama-1b's model: section with the same run settings.
  { cat "$work/sft.yaml"; sed -n '/^model:/,/^[a-z]/p' "$src/jobs/configs/llama-1b.yaml" | sed '$d'; } >"$work/old.yaml"
  measure old "$old" "$work/old.yaml" "$work/one.safetensors"
fi
