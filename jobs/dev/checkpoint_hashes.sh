#!/usr/bin/env bash
# A refactor's equality check: short runs of the three tasks (siglip, lm, detect, 2 ranks) and a
# killed-and-resumed siglip run, each checkpoint hashed group by group (every dataset's bytes, by
# name) and its root attributes (the config too; the time and the build that wrote it left out).
# Run it with the binary before and after a change and compare the outputs: they must be identical
# (and siglip-resumed's last line equals siglip's: an exact resume).
# Usage: jobs/dev/checkpoint_hashes.sh MERIDIAN_BINARY [WORK_DIR]   (a line per checkpoint)
set -euo pipefail
meridian=$(realpath "$1")
work=${2:-$(mktemp -d)}
src=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run() { mpirun --oversubscribe -np 2 --bind-to none "$meridian" "$@" --log-level warn >"$work/last.log" 2>&1 ||
  { cat "$work/last.log" >&2; echo "checkpoint_hashes: failed: $*" >&2; exit 1; }; }
[[ -f $work/img.h5 ]] || run prep synthetic --count 128 --size 32 --vocab-size 300 --context-length 16 --out "$work/img.h5"
[[ -f $work/text.h5 ]] || run prep synthetic --kind text --count 300 --out "$work/text.h5"
[[ -f $work/det.h5 ]] || run prep synthetic --kind detection --count 64 --size 64 --out "$work/det.h5"
cat >"$work/siglip.yaml" <<YAML
model: {image_size: 32, patch: 8, context_length: 16, vocab_size: 300, embed: 32,
        vision: {width: 32, depth: 1, heads: 2, mlp_ratio: 2}, text: {width: 32, depth: 1, heads: 2, mlp_ratio: 2}}
train: {batch: 8, steps: 8, log_every: 4, health_every: 0}
optim: {lr: 2.0e-3, warmup: 3}
data: {augment: true}
checkpoint: {every_steps: 4}
YAML
rm -rf "$work"/runs
run train --config "$work/siglip.yaml" --data "$work/img.h5" --run-dir "$work/runs/siglip"
run train --config "$work/siglip.yaml" --data "$work/img.h5" --run-dir "$work/runs/siglip-resumed" --set train.stop_at=4
run train --config "$work/siglip.yaml" --data "$work/img.h5" --run-dir "$work/runs/siglip-resumed" --resume auto
run train --config "$src/jobs/configs/lm-tiny.yaml" --data "$work/text.h5" --run-dir "$work/runs/lm" \
  --set train.steps=6 --set train.log_every=3 --set train.health_every=0 --set checkpoint.every_steps=6
run train --config "$src/jobs/configs/lm-tiny.yaml" --data "$work/text.h5" --run-dir "$work/runs/lm-zero3" \
  --set train.steps=6 --set train.log_every=3 --set train.health_every=0 --set checkpoint.every_steps=6 --set optim.zero=3
run train --config "$src/jobs/configs/detect-synthetic.yaml" --data "$work/det.h5" --run-dir "$work/runs/detect" \
  --set model.width=0.125 --set train.batch=8 --set train.steps=6 --set optim.warmup=2 --set train.log_every=3 \
  --set train.health_every=0 --set data.close_mosaic=0 --set checkpoint.every_steps=6
/usr/bin/python3 - "$work/runs" <<'PY'
import glob, hashlib, os, sys
import h5py
root = sys.argv[1]
skip = {"time", "created_by"}  # when it was written, and by which build
for path in sorted(glob.glob(os.path.join(root, "*", "checkpoints", "step_*.h5"))):
    parts = {}
    with h5py.File(path, "r") as f:
        for group in sorted(f.keys()):
            h = hashlib.sha256()
            def visit(name, obj):
                if isinstance(obj, h5py.Dataset):
                    h.update(name.encode())
                    h.update(obj[()].tobytes() if obj.shape != () else repr(obj[()]).encode())
            f[group].visititems(visit)
            parts[group] = h.hexdigest()[:16]
        h = hashlib.sha256()
        for k in sorted(f.attrs):
            if k not in skip:  # the work directory in the config's paths named WORK
                v = f.attrs[k]
                v = v.decode() if isinstance(v, bytes) else v
                v = v.replace(os.path.dirname(root), "WORK") if isinstance(v, str) else v
                h.update(k.encode()); h.update(repr(v).encode())
        parts["attrs"] = h.hexdigest()[:16]
    print(os.path.relpath(path, root), " ".join(f"{k}={v}" for k, v in parts.items()))
PY
