#!/usr/bin/env bash
# Makes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/) and the files targets complete
# their input with (tests/fuzz/base/), with meridian's own writers and the real libraries
# (transformers, safetensors, OpenCV, Python's tarfile): small valid files of every format a target
# reads. Run by hand when a format changes; its output is committed.
#
#   tests/fuzz/make_seeds.sh BUILD     (BUILD: a build directory with build/meridian)
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
fz=$src/tests/fuzz
meridian=$(cd "$1" && pwd)/meridian
py=${PYTHON:-/opt/meridian/venv/bin/python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$fz/corpus" "$fz/base"
mkdir -p "$fz/base"
c() { mkdir -p "$fz/corpus/$1" && echo "$fz/corpus/$1/$2"; }  # c TARGET NAME: a seed's path
# choice N FILE OUT: OUT is the byte N (a target's take_choice) then FILE.
choice() { { printf "\\$(printf %03o "$1")"; cat "$2"; } >"$3"; }

# ---- Hugging Face directories (transformers' save_pretrained) and their safetensors shards.
"$py" "$src/tests/models/hf_siglip.py" make "$fz/base/siglip" --shard-bytes 20000 >/dev/null
"$py" "$src/tests/models/hf_llama.py" make "$fz/base/llama" --shard-bytes 20000 >/dev/null
files=(config.json model.safetensors.index.json tokenizer_config.json preprocessor_config.json)
for f in 0 1; do
  family=$([ $f = 0 ] && echo siglip || echo llama)
  for i in 0 1 2 3; do
    [ -f "$fz/base/$family/${files[$i]}" ] && choice $((i * 2 + f)) "$fz/base/$family/${files[$i]}" "$(c hf_dir "$family-${files[$i]}")"
  done
  cp "$fz/base/$family/model-00001-of-"*.safetensors "$(c safetensors "$family-shard1.safetensors")"
done
"$py" - "$fz/corpus/safetensors" <<'PY'
import sys, torch
from safetensors.torch import save_file
d = sys.argv[1]
save_file({"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.tensor([1, 0, 1], dtype=torch.bool),
           "h": torch.ones(2, dtype=torch.bfloat16), "i": torch.tensor([7], dtype=torch.int64),
           "e": torch.zeros(0, 4, dtype=torch.float16)}, f"{d}/dtypes.safetensors", metadata={"format": "pt"})
save_file({}, f"{d}/empty.safetensors")
PY

# ---- configs and model YAMLs: the shipped ones.
for f in "$src"/jobs/configs/*.yaml; do cp "$f" "$(c config_yaml "$(basename "$f")")"; done
for f in "$src"/jobs/configs/ultralytics/*.yaml; do cp "$f" "$(c model_yaml "$(basename "$f")")"; done

# ---- Ultralytics data.yaml, YOLO labels, COCO instances.
printf 'path: .\ntrain: images/train\nval: images/val\nnames:\n  0: car\n  1: truck\n' >"$(c data_yaml map.yaml)"
printf 'train: train\nval: val\nnc: 2\nnames: [car, "truck"]\n' >"$(c data_yaml list.yaml)"
printf '0 0.5 0.5 0.25 0.25\n1 0.1 0.2 0.05 0.1\n' >"$(c yolo_labels two.txt)"
printf '3 0.500000 0.400000 1.000000 0.800000\r\n' >"$(c yolo_labels crlf.txt)"
"$py" - "$(c coco_json instances.json)" <<'PY'
import json, sys
json.dump({"images": [{"id": 4, "file_name": "a.jpg", "width": 640, "height": 480},
                      {"id": 9, "file_name": "b.jpg", "width": 320, "height": 240}],
           "annotations": [{"id": 1, "image_id": 4, "category_id": 3, "bbox": [10, 20, 100, 50], "area": 4000, "iscrowd": 0},
                           {"id": 2, "image_id": 4, "category_id": 7, "bbox": [0, 0, 640, 480], "area": 9, "iscrowd": 1},
                           {"id": 3, "image_id": 9, "category_id": 7, "bbox": [5.5, 6.5, 7, 8], "iscrowd": 0}],
           "categories": [{"id": 3, "name": "car"}, {"id": 7, "name": "truck"}]}, open(sys.argv[1], "w"))
PY

# ---- captions (UCM-captions' first entries as JSON Lines, Karpathy JSON and CSV) and text records.
ucm=$src/../shared/data/ucm-captions/captions.jsonl
"$py" - "$ucm" "$work" <<'PY'
import csv, json, sys
rows = [json.loads(l) for l in open(sys.argv[1]).readlines()[:3]] if sys.argv[1] else []
w = sys.argv[2]
open(f"{w}/captions.jsonl", "w").write("".join(json.dumps(r) + "\n" for r in rows))
json.dump({"images": [{"filename": r["image"].split("/")[-1], "filepath": "/".join(r["image"].split("/")[:-1]),
                       "split": r["split"], "sentences": [{"raw": t, "tokens": t.split()} for t in r["captions"]]}
                      for r in rows], "dataset": "ucm"}, open(f"{w}/karpathy.json", "w"))
with open(f"{w}/captions.csv", "w", newline="") as f:
    out = csv.writer(f)
    out.writerow(["image", "caption", "class", "split"])
    for r in rows:
        for t in r["captions"][:2]:
            out.writerow([r["image"], t, r["class"], r["split"]])
open(f"{w}/alpaca.json", "w").write(json.dumps([
    {"instruction": "Name the colour.", "input": "grass", "output": "green"},
    {"instruction": "Say hello.", "input": "", "output": "Hello!", "split": "train"}], indent=2))
open(f"{w}/chat.jsonl", "w").write("".join(json.dumps(r) + "\n" for r in [
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                  {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"},
                  {"role": "assistant", "content": "Bye."}]},
    {"text": "A plain document.", "split": "test"},
    {"instruction": "Count.", "output": "1 2 3"}]))
open(f"{w}/chat-user.jsonl", "w").write(json.dumps({"messages": [{"role": "user", "content": "Hi"},
                                                                 {"role": "assistant", "content": "Hello."}]}) + "\n")
PY
choice 0 "$work/captions.jsonl" "$(c captions ucm.jsonl)"
choice 1 "$work/karpathy.json" "$(c captions karpathy.json)"
choice 2 "$work/captions.csv" "$(c captions ucm.csv)"
choice 1 "$work/alpaca.json" "$(c text_records alpaca-llama2.json)"
choice 0 "$work/chat.jsonl" "$(c text_records chat-llama2.jsonl)"
choice 2 "$work/chat-user.jsonl" "$(c text_records chat-mistral.jsonl)"

# ---- images (OpenCV's encoders; a five-band TIFF written field by field) and a webdataset shard.
"$py" - "$work" <<'PY'
import struct, sys, tarfile, io, json
import numpy as np, cv2
w = sys.argv[1]
rng = np.random.default_rng(0)
img = rng.integers(0, 255, (12, 16, 3), dtype=np.uint8)
for ext in ["jpg", "png", "bmp", "webp", "ppm", "tif"]:
    cv2.imwrite(f"{w}/img.{ext}", img)
cv2.imwrite(f"{w}/gray16.png", (rng.integers(0, 65535, (8, 8))).astype(np.uint16))
cv2.imwrite(f"{w}/rgba.tif", rng.integers(0, 255, (8, 8, 4), dtype=np.uint8))
# Five 8-bit bands, contiguous, uncompressed: the multispectral case OpenCV refuses and libtiff reads.
h, wd, bands = 4, 6, 5
data = rng.integers(0, 255, (h, wd, bands), dtype=np.uint8).tobytes()
tags = [(256, 3, 1, wd), (257, 3, 1, h), (258, 3, bands, None), (259, 3, 1, 1), (262, 3, 1, 1),
        (273, 4, 1, None), (277, 3, 1, bands), (278, 3, 1, h), (279, 4, 1, len(data)), (284, 3, 1, 1), (338, 3, 1, 0)]
ifd_at = 8
extra_at = ifd_at + 2 + 12 * len(tags) + 4
bits = struct.pack("<5H", *([8] * bands))
data_at = extra_at + len(bits)
out = struct.pack("<2sHI", b"II", 42, ifd_at) + struct.pack("<H", len(tags))
for tag, typ, count, value in tags:
    if tag == 258: value = extra_at
    if tag == 273: value = data_at
    out += struct.pack("<HHI", tag, typ, count) + (struct.pack("<HH", value, 0) if typ == 3 and count == 1 else struct.pack("<I", value))
out += struct.pack("<I", 0) + bits + data
open(f"{w}/five.tif", "wb").write(out)
with tarfile.open(f"{w}/shard.tar", "w") as t:
    def add(name, b):
        info = tarfile.TarInfo(name); info.size = len(b); t.addfile(info, io.BytesIO(b))
    add("00000/000000001.jpg", open(f"{w}/img.jpg", "rb").read())
    add("00000/000000001.txt", b"a field beside a road\n")
    add("00000/000000002.png", open(f"{w}/img.png", "rb").read())
    add("00000/000000002.json", json.dumps({"captions": ["two", "captions"]}).encode())
PY
exts=(jpg png tif bmp webp ppm)
for i in 0 1 2 3 4 5; do choice "$i" "$work/img.${exts[$i]}" "$(c image_decode "img.${exts[$i]}")"; done
choice 1 "$work/gray16.png" "$(c image_decode gray16.png)"
choice 2 "$work/rgba.tif" "$(c image_decode rgba.tif)"
choice $((2 + 6 * 2)) "$work/five.tif" "$(c image_decode five-bands-432.tif)"
choice $((2 + 6 * 1)) "$work/five.tif" "$(c image_decode five-bands-123.tif)"
cp "$work/shard.tar" "$(c webdataset shard.tar)"

# ---- datasets (meridian prep synthetic) and a checkpoint and run directory (meridian train).
for kind in image-text detection text; do
  "$meridian" prep synthetic --kind $kind --count 3 --size 32 --captions-per-image 2 --context-length 8 \
    --tokenizer "$fz/base/llama/tokenizer.model" --out "$(c h5_dataset $kind.h5)" --log-level warn
done
"$meridian" prep synthetic --kind image-text --count 2 --size 32 --captions-per-image 1 --context-length 8 \
  --tokenizer "$fz/base/llama/tokenizer.model" --encode jpeg --out "$(c h5_dataset image-text-jpeg.h5)" --log-level warn
"$meridian" train --config "$src/jobs/configs/lm-tiny.yaml" --data "$fz/corpus/h5_dataset/text.h5" --run-dir "$work/run" \
  --set model.dim=8 --set model.layers=1 --set model.heads=2 --set model.kv_heads=1 --set model.hidden=16 \
  --set train.steps=2 --set train.batch=2 --set checkpoint.every_steps=2 --log-level warn
cp "$work/run/checkpoints/step_00000002.h5" "$(c h5_checkpoint lm-step2.h5)"
mkdir -p "$fz/base/run/logs"
for f in metrics.csv health.jsonl attempts.jsonl config.yaml logs/rank_0.log; do cp "$work/run/$f" "$fz/base/run/$f"; done
names=(metrics.csv health.jsonl attempts.jsonl config.yaml logs/rank_0.log)
for i in 0 1 2 3 4; do choice "$i" "$fz/base/run/${names[$i]}" "$(c report_run "$(basename "${names[$i]}")")"; done
du -sh "$fz/corpus" "$fz/base"
