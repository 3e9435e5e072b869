#!/usr/bin/env bash
# Llama SFT against its speed peer, Hugging Face's Trainer (jobs/bench/hf_trainer_sft.py under torchrun,
# gloo, its AdamW, bf16 autocast on the CPU), in one run: the same model (a random LlamaForCausalLM made
# by transformers in the published layout, tests/models/hf_llama.py make --shape; default the 110M
# shape of jobs/configs/lm-100m.yaml: 768 wide, 12 layers, tied embeddings, vocabulary 32000), the same
# data (`prep synthetic --kind text --tokenizer` of that model: instruction records, loss on the
# responses), the same sequence length, batch and precision; 2 ranks, each on one core with one thread.
# meridian runs `bench train --init DIR` (its AdamW, DDP). Alternates meridian and the Trainer PAIRS
# times; prints tokens/s of each and the ratio of each pair.
# Usage: jobs/bench/lm-vs-hf-trainer.sh [build dir (default build)]
# Environment: BENCH_DIR (default /tmp/meridian-bench-hf-trainer), SHAPE (hidden,intermediate,layers,
# heads,kv_heads,vocab; default 768,2048,12,12,12,32000), SEQ (128), BATCH (per rank, 2), STEPS (10),
# PAIRS (2), PRECISION (bf16 or float32).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/jobs/python-env.sh"
bin=$(cd "${1:-$root/build}" && pwd)/meridian
[[ -x $bin ]] || { echo "lm-vs-hf-trainer.sh: $bin not found; build first" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
dir=${BENCH_DIR:-/tmp/meridian-bench-hf-trainer}
shape=${SHAPE:-768,2048,12,12,12,32000} seq=${SEQ:-128} batch=${BATCH:-2} steps=${STEPS:-10} pairs=${PAIRS:-2}
precision=${PRECISION:-bf16}
mkdir -p "$dir"
if [[ ! -f $dir/sft.h5 || $(cat "$dir/shape" 2>/dev/null) != "$shape" ]]; then
  rm -rf "$dir/hf" "$dir/sft.h5"
  python3 "$root/tests/models/hf_llama.py" make "$dir/hf" --shape "$shape" --tie --dtype f32 --shard-bytes 1000000000 >/dev/null
  mpirun --oversubscribe -np 2 "$bin" prep synthetic --kind text --count 4000 --tokenizer "$dir/hf" --out "$dir/sft.h5" \
    --log-level warn >/dev/null
  echo "$shape" >"$dir/shape"
fi
printf 'task: {name: lm}\ndata: {seq_len: %d, mode: pack}\ntrain: {batch: %d}\noptim: {lr: 3.0e-4, warmup: 1}\n' \
  "$seq" "$batch" >"$dir/lm.yaml"
hf_flag=(); [[ $precision == bf16 ]] && hf_flag=(--bf16)
for pair in $(seq 1 "$pairs"); do
  out=$(mpirun -np 2 --bind-to core "$bin" bench train --config "$dir/lm.yaml" --init "$dir/hf" --data "$dir/sft.h5" \
    --threads 1 --set train.steps=$((steps + 1)) --set train.precision="$precision" --set train.log_every=1000 \
    --set train.eval_every=0 --set train.health_every=0 --log-level warn 2>&1) || { echo "$out" | tail; exit 1; }
  m=$(grep -oE 'bench train: 2 ranks, [0-9.]+' <<<"$out" | grep -oE '[0-9.]+$')
  m_tokens=$(python3 -c "print(f'{$m * $seq:.1f}')")
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  out=$(OMP_NUM_THREADS=1 torchrun --nproc_per_node 2 --master-port "$port" "$root/jobs/bench/hf_trainer_sft.py" \
    "$dir/hf" "$dir/sft.h5" --seq-len "$seq" --batch "$batch" --steps "$steps" --out "$dir/hf-out" "${hf_flag[@]}" 2>&1) ||
    { echo "$out" | tail -20; exit 1; }
  h=$(grep -oE 'hf_trainer tokens/s [0-9.]+' <<<"$out" | grep -oE '[0-9.]+$')
  echo "pair $pair: meridian $m_tokens tokens/s, HF Trainer $h tokens/s: meridian / Trainer = $(python3 -c "print(f'{$m_tokens / $h:.2f}')")"
done
echo "lm-vs-hf-trainer: shape $shape, seq $seq, batch $batch per rank x 2 ranks, $precision, $steps timed steps;" \
  "transformers $(python3 -c 'import transformers; print(transformers.__version__)'), torch $(python3 -c 'import torch; print(torch.__version__)')"
