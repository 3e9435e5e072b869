#!/usr/bin/env bash
# Usage: jobs/bench/checkpoint-hashes.sh MERIDIAN OUTDIR — short runs of the three tasks under every
# strategy (lm-tiny: DDP, ZeRO-1, ZeRO-3; SigLIP tiny: DDP, ZeRO-2, ZeRO-1 bf16; the detector: AdamW
# + EMA, SGD), 6 steps on 2 ranks with a checkpoint at the end, and SigLIP's DDP run stopped at step 3
# and resumed (its step-6 line equals siglip_ddp's: an exact resume); prints one SHA-256 per checkpoint
# group (/model, /optim, /ema) over every dataset's name and bytes. Run it with two binaries and diff
# the outputs: a refactoring that changes no numerics prints the same lines (docs/performance.md).
# Needs mpirun and h5py (meridian's Python environment, jobs/setup-node.sh).
set -eu
meridian=$1 out=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
source "$src/jobs/python-env.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out/data"
d=$out/data
mpirun --oversubscribe -np 2 "$meridian" prep synthetic --kind image-text --count 32 --size 64 --out "$d/it.h5" \
  --log-level warn >/dev/null
mpirun --oversubscribe -np 2 "$meridian" prep synthetic --kind detection --count 32 --size 64 --out "$d/det.h5" \
  --log-level warn >/dev/null
mpirun --oversubscribe -np 2 "$meridian" prep synthetic --kind text --count 200 --out "$d/text.h5" \
  --log-level warn >/dev/null
run() {
  local name=$1 config=$2 data=$3
  shift 3
  [[ " $* " == *" --resume "* ]] || rm -rf "${out:?}/$name"
  mpirun --oversubscribe -np 2 "$meridian" train --config "$src/jobs/configs/$config" --data "$d/$data" \
    --set train.batch=4 --set train.steps=6 --set train.health_every=0 --set train.log_every=100 \
    --run-dir "$out/$name" --log-level warn "$@" >"$out/$name.log" 2>&1 || { tail "$out/$name.log"; exit 1; }
}
run lm_ddp lm-tiny.yaml text.h5 --set data.seq_len=64
run lm_z1 lm-tiny.yaml text.h5 --set data.seq_len=64 --set optim.zero=1
run lm_z3 lm-tiny.yaml text.h5 --set data.seq_len=64 --set optim.zero=3
run siglip_ddp siglip-tiny.yaml it.h5 --set model.image_size=64
run siglip_z2 siglip-tiny.yaml it.h5 --set model.image_size=64 --set optim.zero=2
run siglip_bf16z1 siglip-tiny.yaml it.h5 --set model.image_size=64 --set optim.zero=1 --set train.precision=bf16
run siglip_resumed siglip-tiny.yaml it.h5 --set model.image_size=64 --set train.stop_at=3
run siglip_resumed siglip-tiny.yaml it.h5 --set model.image_size=64 --resume auto
run detect detect-synthetic.yaml det.h5
run detect_sgd detect-synthetic.yaml det.h5 --set optim.name=sgd
python3 - "$out" <<'PY'
import glob, hashlib, os, sys
import h5py
for f in sorted(glob.glob(sys.argv[1] + "/*/checkpoints/step_00000006.h5")):
    h = h5py.File(f, "r")
    parts = []
    for g in ("model", "optim", "ema"):
        if g not in h:
            continue
        names = []
        h[g].visit(lambda n: names.append(n) if isinstance(h[g][n], h5py.Dataset) else None)
        sha = hashlib.sha256()
        for n in sorted(names):
            sha.update(n.encode())
            sha.update(h[g][n][()].tobytes())
        parts.append(f"{g}:{sha.hexdigest()[:12]}({len(names)})")
    print(os.path.relpath(f, sys.argv[1]), " ".join(parts))
PY
