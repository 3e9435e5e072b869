#!/usr/bin/env bash
# Usage: zero_ckpt_mpi_test.sh MPIRUN MERIDIAN SOURCE_DIR — ZeRO-1 checkpoints (optim.zero: true,
# lm-tiny with model.hidden 2048 (about 845k parameters: on 2 ranks shards of 2 x 2^18 elements, so
# several checksum blocks per rank and a partial last one) on a synthetic instruction set):
#  - 6 steps + resume + 6 steps equals 12 straight, bit for bit (/model and /optim, h5diff), with the
#    moments stored as optim/flat/* written by every rank's shard;
#  - resharding 2 -> 4 and 4 -> 2: a checkpoint saved with ZeRO on N ranks resumes with ZeRO on M
#    ranks (each rank reads its flat range) and with plain AdamW on M ranks (every parameter's
#    moments cut out of the flat vectors); the two continuations see the same data and must end at
#    the same model up to the rounding of reduce-scatter vs allreduce (within 1e-5). Moments
#    read at the wrong offsets or not at all move the weights by ~lr = 3e-3 per step instead;
#  - a plain AdamW checkpoint resumes into ZeRO the same way.
set -u
mpirun=$1 meridian=$2 src=$3
# shellcheck source=tests/mpi_script_lib.sh
source "$(dirname "$0")/../mpi_script_lib.sh"
synthetic text.h5
# train NP RUN_DIR [--set ...]: 12 steps, global batch 8, a checkpoint every 3 steps, ZeRO on.
train() {
  local np=$1 dir=$2
  shift 2
  "$mpirun" --oversubscribe -np "$np" "$meridian" train --config "$src/jobs/configs/lm-tiny.yaml" --data "$tmp/text.h5" \
    --set train.batch=$((8 / np)) --set data.seq_len=64 --set train.steps=12 --set optim.lr=3e-3 --set optim.warmup=2 \
    --set model.hidden=2048 --set optim.zero=true --set checkpoint.every_steps=3 --set checkpoint.keep_last=10 --set train.health_every=0 \
    --set train.log_every=100 --run-dir "$dir" --log-level warn "$@" >"$dir.log" 2>&1 || { cat "$dir.log"; fail "train $np $dir $* exited"; }
}
same() {  # same A B GROUP [h5diff options]
  local a=$1 b=$2 group=$3
  shift 3
  h5diff -r "$@" "$a" "$b" "$group" "$group" >"$tmp/diff" 2>&1 || { head -20 "$tmp/diff"; fail "$group differs: $a vs $b"; }
}
ck() { echo "$tmp/$1/checkpoints/step_000000$2.h5"; }
close() {  # close A B: every /model dataset equal within 1e-5 (checksum attributes differ with the values)
  python3 - "$1" "$2" <<'PY'  # exit status: 0 when close
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
assert sorted(a["model"]) == sorted(b["model"])
worst = max(float(np.abs(a["model"][n][()] - b["model"][n][()]).max()) for n in a["model"])
print(f"largest /model difference {worst:.3g}")
assert worst <= 1e-5, worst
PY
}

# Exact resume on the same world size.
train 2 "$tmp/straight"
train 2 "$tmp/split" --set train.stop_at=6
train 2 "$tmp/split" --resume auto
h5ls -r "$(ck straight 12)" | grep -q "^/optim/flat/exp_avg_sq " || fail "no optim/flat/exp_avg_sq in a ZeRO checkpoint"
h5ls -r "$(ck straight 12)" | grep -v "^/optim/flat/" | grep -q "/exp_avg " && fail "per-parameter moments in a ZeRO checkpoint"
for group in /model /optim; do same "$(ck straight 12)" "$(ck split 12)" $group; done

# N -> M: continue step 6 of an N-rank ZeRO run on M ranks, sharded and not, to step 9.
reshard() {  # reshard N M SOURCE_RUN
  local n=$1 m=$2 from=$3
  train "$m" "$tmp/zero_${n}to${m}" --resume "$(ck "$from" 06)" --set train.stop_at=9
  train "$m" "$tmp/plain_${n}to${m}" --resume "$(ck "$from" 06)" --set train.stop_at=9 --set optim.zero=false
  close "$(ck "zero_${n}to${m}" 09)" "$(ck "plain_${n}to${m}" 09)" || fail "$n -> $m: sharded and unsharded runs differ"
  # The weights did move (the comparison is not of two copies of step 6).
  close "$(ck "$from" 06)" "$(ck "zero_${n}to${m}" 09)" >/dev/null 2>&1 && fail "$n -> $m: no update"
  # And the sharded state written on M ranks is the same state as the unsharded one (to rounding).
  python3 - "$(ck "zero_${n}to${m}" 09)" "$(ck "plain_${n}to${m}" 09)" <<'PY' || fail "$n -> $m: optimizer states differ"
import sys, h5py, numpy as np
z, p = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
names = z.attrs["optim_flat"]
names = (names.decode() if isinstance(names, bytes) else names).split("\n")[:-1]
for moment, tol in (("exp_avg", 1e-5), ("exp_avg_sq", 1e-8)):
    flat = np.concatenate([p[f"optim/{n}/{moment}"][()].reshape(-1) for n in names])
    got = z[f"optim/flat/{moment}"][()]
    assert got.shape == flat.shape, (got.shape, flat.shape)
    assert np.abs(got - flat).max() <= tol, (moment, np.abs(got - flat).max())
PY
}
reshard 2 4 straight
train 4 "$tmp/four" --set train.stop_at=6
reshard 4 2 four

# A plain AdamW checkpoint into ZeRO.
train 2 "$tmp/adamw" --set train.stop_at=6 --set optim.zero=false
train 2 "$tmp/a2z" --resume "$(ck adamw 06)" --set train.stop_at=9
train 2 "$tmp/a2a" --resume "$(ck adamw 06)" --set train.stop_at=9 --set optim.zero=false
close "$(ck a2z 09)" "$(ck a2a 09)" || fail "AdamW -> ZeRO: sharded and unsharded runs differ"
echo PASS
