# shellcheck shell=bash
# Whether a run that lost nodes should grow back now: sourced by jobs/mpirun-restart.sh and
# jobs/slurm/train.sbatch. Everything comes from the run directory: metrics.csv (train/loss rows:
# step and wall time), attempts.jsonl (train.steps of the latest start) and logs/rank_0.log (how long
# the last checkpoint took to write).

# The wall time of the first train row logged at or after time $2 in run directory $1 (empty: none yet).
grow_first_step_at() { awk -F, -v t0="$2" '$3 == "train/loss" && $2 >= t0 {print $2; exit}' "$1/metrics.csv" 2>/dev/null; }

# grow_back_verdict RUN_DIR SINCE RANKS_NOW RANKS_FULL [COST [EXTRA WHAT]]: prints one line (steps left, the time
# they take at RANKS_NOW, what RANKS_FULL would save, what a restart costs and how that is known) and
# returns 0 when growing back saves more than the restart costs, 1 when it does not (the remaining
# time only shrinks: no need to ask again), 2 when too few steps have been logged since SINCE (the
# attempt's start, epoch seconds) to tell. Growing back from N to F ranks is taken to divide the
# step time by F / N (data parallel, the global batch fixed). COST: seconds measured at an earlier
# grow-back; else (empty) the last checkpoint's write time plus this attempt's start to its first step,
# plus EXTRA seconds (WHAT says what they are: a requeued Slurm job's wait in the queue).
grow_back_verdict() {
  local dir=$1 since=$2 now=$3 full=$4 cost=${5:-} extra=${6:-0} what=${7:-} p step rate steps first ckpt how
  p=$(awk -F, -v t0="$since" '$3 == "train/loss" && $2 >= t0 {if (!n++) {s0 = $1; w0 = $2} s = $1; w = $2}
    END {if (n >= 2 && w > w0) print s, (s - s0) / (w - w0)}' "$dir/metrics.csv" 2>/dev/null)
  steps=$(grep '"event":"start"' "$dir/attempts.jsonl" 2>/dev/null | tail -1 | grep -oE '"steps":[0-9]+' | cut -d: -f2)
  if [[ -z $p || -z $steps ]]; then
    echo "too few steps logged in this attempt to weigh a restart"
    return 2
  fi
  read -r step rate <<<"$p"
  if [[ -n $cost ]]; then
    how="measured at the last grow-back"
  else
    first=$(grow_first_step_at "$dir" "$since")
    ckpt=$(grep -oE 'written (in the background )?in [0-9.]+ s' "$dir/logs/rank_0.log" 2>/dev/null | tail -1 | grep -oE '[0-9.]+')
    cost=$(awk -v a="$first" -v b="$since" -v c="${ckpt:-0}" -v d="$extra" 'BEGIN {printf "%.1f", a - b + c + d}')
    how="the last checkpoint's write ${ckpt:-?} s (logs/rank_0.log) + this attempt's start to its first step${what:+ + $what}"
  fi
  awk -v s="$step" -v n="$steps" -v r="$rate" -v now="$now" -v full="$full" -v c="$cost" -v how="$how" \
    'BEGIN {left = (n - s) / r; gain = left * (1 - now / full)
            printf "%d step(s) left, about %.0f s at %d ranks; %d ranks would save about %.0f s; a restart costs about %.0f s (%s)\n", n - s, left, now, full, gain, c, how
            exit !(gain > c)}'
}
