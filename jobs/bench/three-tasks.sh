# Sourced by jobs/bench/bf16.sh and jobs/bench/compare-builds.sh: the three tasks' benchmark setup.
#   SigLIP tiny   jobs/configs/ucm-siglip-tiny.yaml on UCM at 128 px, batch 32/rank
#   detect        jobs/configs/detect-synthetic.yaml (YOLO12n) on synthetic 128 px scenes, batch 16/rank
#   lm            jobs/configs/lm-100m.yaml (110M parameters) on synthetic instructions, 2 x 128 tokens/rank
# Needs `root` (the checkout) and `me` (the caller's name, for messages). Provides:
#   prepare_data BIN     the data in $dir (BENCH_DIR, default /tmp/meridian-bench-bf16), made once with BIN prep
#   bench_task BIN TASK PRECISION STEPS
#                        `bench train` on 2 ranks bound to a core each, 1 thread, STEPS measured steps;
#                        prints its output (exits on failure, with its last lines)
#   batch[TASK]          samples per rank per step (the configs')
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dir=${BENCH_DIR:-/tmp/meridian-bench-bf16}
declare -A config=([siglip]=ucm-siglip-tiny.yaml [detect]=detect-synthetic.yaml [lm]=lm-100m.yaml)
declare -A data=([siglip]=ucm-128.h5 [detect]=det.h5 [lm]=text.h5)
declare -A extra=([siglip]="--set model.vocab_size=520" [detect]="--set train.ema=0" [lm]="")
declare -A batch=([siglip]=32 [detect]=16 [lm]=2)

prepare_data() {
  local prep=(mpirun --oversubscribe -np 2 "$1" prep) ucm=$root/../shared/data/ucm-captions
  mkdir -p "$dir"
  if [[ ! -f $dir/ucm-128.h5 ]]; then
    [[ -f $ucm/captions.jsonl ]] || { echo "$me: no $ucm" >&2; exit 2; }
    "${prep[@]}" image-text --images "$ucm" --captions "$ucm/captions.jsonl" --split train --size 128 \
      --context-length 32 --vocab-size 8000 --out "$dir/ucm-128.h5" --log-level warn
  fi
  [[ -f $dir/det.h5 ]] || "${prep[@]}" synthetic --kind detection --count 512 --size 128 --out "$dir/det.h5" --log-level warn
  [[ -f $dir/text.h5 ]] || "${prep[@]}" synthetic --kind text --count 2000 --out "$dir/text.h5" --log-level warn
}

bench_task() {
  local out
  # shellcheck disable=SC2086
  out=$(mpirun -np 2 --bind-to core "$1" bench train --config "$root/jobs/configs/${config[$2]}" \
    --data "$dir/${data[$2]}" --threads 1 ${extra[$2]} --set train.steps=$(($4 + 1)) \
    --set train.precision="$3" --set train.log_every=1000 --set train.eval_every=0 \
    --set train.health_every=0 --log-level warn 2>&1) || { echo "$out" | tail >&2; exit 1; }
  echo "$out"
}
