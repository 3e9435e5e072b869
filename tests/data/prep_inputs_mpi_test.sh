#!/usr/bin/env bash
# Usage: prep_inputs_mpi_test.sh MPIRUN MERIDIAN — prep and inspect on awkward but common inputs,
# through the binary: YOLO labels outside [0, 1] (pixels) and COCO boxes off their image skip the
# image naming file and line or annotation (exit 2 with --strict); a detection file without boxes is
# warned about; a UTF-8 byte-order mark starts every kind of text input; empty inputs, --out naming
# a directory, `prep --help`; inspect and train on files written without chunks (h5py's default);
# the loaders' advice when a batch is larger than the dataset; the benchmark forms of remote-sensing
# papers: a Karpathy-style dataset_*.json (UCM-captions, RSICD, RSITMD) and class folders (AID, NWPU);
# Ultralytics' data.yaml (both splits; missing names, splits and directories exit 2); --holdout (the
# same held-out records on every run, one tokenizer, bad options exit 2, a failure leaves no file).
set -u
mpirun=$1 meridian=$2
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
run() { "$mpirun" --oversubscribe -np 2 "$meridian" "$@"; }
# expect CODE TEXT CMD...: CMD must exit CODE and print TEXT (its output is in $tmp/o).
expect() {
  local code=$1 text=$2
  shift 2
  "$@" >"$tmp/o" 2>&1
  local rc=$?
  [[ $rc == "$code" ]] && grep -qF -- "$text" "$tmp/o" || { cat "$tmp/o"; fail "$* exited $rc, expected $code and '$text'"; }
}
bom=$'\xEF\xBB\xBF'

# Three images: a 64 x 32, b and c 32 x 32 (24-bit BMP).
mkdir -p "$tmp/images" "$tmp/labels" "$tmp/pixels" "$tmp/none"
python3 - "$tmp/images" <<'PY' || fail "could not write the images"
import struct, sys
for name, w, h in (("a", 64, 32), ("b", 32, 32), ("c", 32, 32)):
    row = (w * 3 + 3) & ~3
    data = bytes(row) * h
    head = struct.pack("<2sIHHI", b"BM", 54 + len(data), 0, 0, 54)
    info = struct.pack("<IiiHHIIiiII", 40, w, h, 1, 24, 0, len(data), 2835, 2835, 0, 0)
    open(f"{sys.argv[1]}/{name}.bmp", "wb").write(head + info + data)
PY

# YOLO: a.txt starts with a byte-order mark; b's box reaches past the right edge (clipped, kept);
# line 3 of c.txt has cx = 1.3. The class names file has a mark and CRLF line ends.
printf '%s0 0.5 0.5 0.25 0.5\n' "$bom" >"$tmp/labels/a.txt"
printf '1 0.95 0.5 0.2 0.4\n' >"$tmp/labels/b.txt"
printf '0 0.5 0.5 0.2 0.2\n0 0.4 0.4 0.1 0.1\n1 1.3 0.5 0.1 0.1\n' >"$tmp/labels/c.txt"
printf '%scar\r\nboat\r\n' "$bom" >"$tmp/names.txt"
yolo=(prep detection --images "$tmp/images" --labels "$tmp/labels" --class-names "$tmp/names.txt" --size 32)
expect 0 "2 of 3 inputs" run "${yolo[@]}" --out "$tmp/yolo.h5"
grep -qF "1 skipped, 2 boxes" "$tmp/o" || { cat "$tmp/o"; fail "YOLO: expected 1 skipped and 2 boxes"; }
grep -qF "skipped $tmp/labels/c.txt: line 3: cx = 1.3 is outside [0, 1] (YOLO labels are normalised to the image; these look like pixels?)" \
  "$tmp/o" || { cat "$tmp/o"; fail "YOLO: c.txt line 3 not named"; }
expect 0 "valid detection dataset" "$meridian" inspect "$tmp/yolo.h5"
grep -qE "^    car +1$" "$tmp/o" && grep -qE "^    boat +1$" "$tmp/o" || { cat "$tmp/o"; fail "YOLO: class names or counts"; }
expect 2 "--strict: $tmp/labels/c.txt: line 3: cx = 1.3 is outside [0, 1]" \
  run "${yolo[@]}" --strict --out "$tmp/strict.h5"
# Labels in pixels: every image is skipped, and prep says why.
for n in a b c; do echo "0 16 16 8 8" >"$tmp/pixels/$n.txt"; done
expect 2 "no input could be read (3 skipped, e.g. $tmp/pixels/a.txt: line 1: cx = 16 is outside [0, 1]" \
  run prep detection --images "$tmp/images" --labels "$tmp/pixels" --size 32 --out "$tmp/pixels.h5"
# No label file at all: a dataset without boxes, said loudly.
expect 0 "WARNING: 0 boxes: none of the 3 images written has a box (labels are read from <labels>/<image path>.txt, e.g. $tmp/none/a.txt" \
  run prep detection --images "$tmp/images" --labels "$tmp/none" --size 32 --out "$tmp/none.h5"

# Ultralytics' data.yaml (COCO8's layout): <root>/images/{train,val} with <root>/labels/{train,val},
# `path` relative to the file, names as a map; each split is its own dataset.
mkdir -p "$tmp/y8/images/train" "$tmp/y8/images/val" "$tmp/y8/labels/train" "$tmp/y8/labels/val" "$tmp/cfg"
cp "$tmp/images/a.bmp" "$tmp/images/b.bmp" "$tmp/y8/images/train/"
cp "$tmp/images/c.bmp" "$tmp/y8/images/val/"
printf '0 0.5 0.5 0.25 0.5
2 0.2 0.2 0.1 0.1
' >"$tmp/y8/labels/train/a.txt"
printf '1 0.5 0.5 0.2 0.4
' >"$tmp/y8/labels/train/b.txt"
printf '2 0.5 0.5 0.5 0.5
' >"$tmp/y8/labels/val/c.txt"
printf 'path: ../y8
train: images/train
val: images/val
test:  # none
names:
  0: person
  2: car
  1: bicycle
' \
  >"$tmp/cfg/data.yaml"
for split in train val; do
  expect 0 "wrote $tmp/y8_$split.h5" run prep detection --data-yaml "$tmp/cfg/data.yaml" --split $split --size 32 --out "$tmp/y8_$split.h5"
done
python3 - "$tmp/y8_train.h5" "$tmp/y8_val.h5" <<'PY' || fail "data.yaml: wrong images, boxes or class names"
import sys, h5py
train, val = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
names = lambda f: [n.decode() if isinstance(n, bytes) else n for n in f["class_names"][...]]
assert names(train) == names(val) == ["person", "bicycle", "car"], names(train)
counts = lambda f: sorted(int(c) for c in f["box_classes"][...])
assert counts(train) == [0, 1, 2] and counts(val) == [2], (counts(train), counts(val))
print("data.yaml: train", counts(train), "val", counts(val))
PY
# Bad descriptions exit 2 on every rank, naming the file and the field.
printf 'path: ../y8
train: images/train
' >"$tmp/cfg/nonames.yaml"
expect 2 "$tmp/cfg/nonames.yaml: names: missing or empty" \
  run prep detection --data-yaml "$tmp/cfg/nonames.yaml" --size 32 --out "$tmp/t.h5"
expect 2 "$tmp/cfg/data.yaml: test: missing" \
  run prep detection --data-yaml "$tmp/cfg/data.yaml" --split test --size 32 --out "$tmp/t.h5"
sed 's#images/val#images/gone#' "$tmp/cfg/data.yaml" >"$tmp/cfg/gone.yaml"
expect 2 "$tmp/cfg/gone.yaml: val: '$tmp/y8/images/gone' is not a directory" \
  run prep detection --data-yaml "$tmp/cfg/gone.yaml" --split val --size 32 --out "$tmp/t.h5"
printf 'path: ../y8
train: images/train
names: {0: a, 2: c}
' >"$tmp/cfg/gap.yaml"
expect 2 "$tmp/cfg/gap.yaml: names: class 1 has no name" \
  run prep detection --data-yaml "$tmp/cfg/gap.yaml" --size 32 --out "$tmp/t.h5"
[[ ! -e $tmp/t.h5 ]] || fail "a refused prep left $tmp/t.h5"

# COCO (with a byte-order mark): b's box lies right of its 32 x 32 image, c's has a negative width.
cat >"$tmp/coco.json" <<JSON
${bom}{"images": [{"id": 1, "file_name": "a.bmp"}, {"id": 2, "file_name": "b.bmp"}, {"id": 3, "file_name": "c.bmp"}],
 "categories": [{"id": 7, "name": "car"}],
 "annotations": [{"image_id": 1, "category_id": 7, "bbox": [24, 8, 16, 16]},
                 {"image_id": 2, "category_id": 7, "bbox": [40, 0, 10, 10]},
                 {"image_id": 3, "category_id": 7, "bbox": [10, 10, -5, 10]}]}
JSON
expect 0 "1 of 3 inputs" run prep detection --images "$tmp/images" --coco "$tmp/coco.json" --size 32 --out "$tmp/coco.h5"
for want in "skipped $tmp/coco.json: annotations[1]: bbox [40, 0, 10, 10] is not on the 32x32 image 'b.bmp' (as a fraction of the image, cx = 1.40625 is outside [0, 1])" \
            "skipped $tmp/coco.json: annotations[2]: bbox [10, 10, -5, 10] has a negative width or height"; do
  grep -qF "$want" "$tmp/o" || { cat "$tmp/o"; fail "COCO: no '$want'"; }
done
sed 's/"id": 7/"id": "seven"/' "$tmp/coco.json" >"$tmp/coco_type.json"
expect 2 "$tmp/coco_type.json: categories.id: expected an integer, got \"seven\"" \
  "$meridian" prep detection --images "$tmp/images" --coco "$tmp/coco_type.json" --size 32 --out "$tmp/t.h5"

# Captions: CSV and JSONL with a byte-order mark; an empty file and a split without entries are named.
printf '%simage,caption\na.bmp,a wide image\nb.bmp,a square image\n' "$bom" >"$tmp/caps.csv"
printf '%s{"image": "a.bmp", "caption": "a wide image", "split": "train"}\n' "$bom" >"$tmp/caps.jsonl"
: >"$tmp/empty.csv"
it=(prep image-text --images "$tmp/images" --size 32 --vocab-size 40 --context-length 8)
expect 0 "2 of 2 inputs" run "${it[@]}" --captions "$tmp/caps.csv" --out "$tmp/csv.h5"
expect 0 "1 of 1 inputs" "$meridian" "${it[@]}" --captions "$tmp/caps.jsonl" --out "$tmp/jsonl.h5"
expect 2 "prep: no input entries in $tmp/empty.csv" "$meridian" "${it[@]}" --captions "$tmp/empty.csv" --out "$tmp/e.h5"
expect 2 "prep: no input entries in $tmp/caps.jsonl with split 'val' (the file's splits: train)" \
  "$meridian" "${it[@]}" --captions "$tmp/caps.jsonl" --split val --out "$tmp/e.h5"
# Text records with a byte-order mark; an empty split is named.
{ printf '%s' "$bom"; for i in $(seq 1 20); do echo "{\"text\": \"record $i of the small text corpus\"}"; done; } >"$tmp/text.jsonl"
expect 0 "20 of 20 inputs" "$meridian" prep text --jsonl "$tmp/text.jsonl" --vocab-size 400 --out "$tmp/text.h5"
expect 2 "prep: no input records in $tmp/text.jsonl with split 'val' (no entry names a split)" \
  "$meridian" prep text --jsonl "$tmp/text.jsonl" --split val --vocab-size 400 --out "$tmp/e.h5"
# --holdout: a validation split where the data has none. 60 records, 20 held out with seed 3, on 2
# ranks in blocks of 4: a second run gives the same files, the held-out one with --out's tokenizer,
# and the two files hold the 60 records, the held-out ones those splitmix64 picks.
for i in $(seq 1 60); do echo "{\"text\": \"record $i of the small text corpus\"}"; done >"$tmp/many.jsonl"
hold=(prep text --jsonl "$tmp/many.jsonl" --vocab-size 400 --block 4 --seed 3)
expect 0 "wrote $tmp/val.h5: 20 of 20 inputs" run "${hold[@]}" --holdout 20 --holdout-out "$tmp/val.h5" --out "$tmp/train.h5"
grep -qF "wrote $tmp/train.h5: 40 of 40 inputs" "$tmp/o" || { cat "$tmp/o"; fail "--holdout: 40 records in --out"; }
expect 0 "wrote $tmp/val2.h5: 20 of 20" run "${hold[@]}" --holdout 20 --holdout-out "$tmp/val2.h5" --out "$tmp/train2.h5"
expect 0 "60 of 60" "$meridian" prep text --jsonl "$tmp/many.jsonl" --tokenizer "$tmp/train.h5" --out "$tmp/all.h5"
python3 - "$tmp" <<'PY2' || fail "--holdout: wrong, unstable or differently tokenized records"
import sys, h5py
d = sys.argv[1]
def docs(name):
    f = h5py.File(f"{d}/{name}.h5", "r")
    t, o = f["tokens"][...], f["doc_offsets"][...]
    return [tuple(t[o[i]:o[i + 1]]) for i in range(len(o) - 1)], f["tokenizer/model"][...].tobytes()
val, tok = docs("val")
train, train_tok = docs("train")
assert tok == train_tok, "the held-out file has another tokenizer"
assert docs("val2") == (val, tok) and docs("train2")[0] == train, "a second run gave other files"
M = (1 << 64) - 1
def mix(x):
    x = (x + 0x9E3779B97F4A7C15) & M
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M
    return x ^ (x >> 31)
held = sorted(sorted(range(60), key=lambda i: mix(mix(3) ^ i))[:20])
every, _ = docs("all")
assert val == [every[i] for i in held], "not the records splitmix64 picks, in file order"
assert train == [every[i] for i in range(60) if i not in held]
print("holdout: 20 + 40 of 60 records, the same on a second run, one tokenizer")
PY2
# Exit 2 naming the option (the rest of the values: data_tests' Holdout.*).
expect 2 "--holdout 500: larger than the 60 records of $tmp/many.jsonl" \
  run "${hold[@]}" --holdout 500 --holdout-out "$tmp/v.h5" --out "$tmp/e.h5"
expect 2 "--holdout: '0' is neither a number of records" "$meridian" "${hold[@]}" --holdout 0 --holdout-out "$tmp/v.h5" --out "$tmp/e.h5"
expect 2 "--holdout-out: required with --holdout" "$meridian" "${hold[@]}" --holdout 20 --out "$tmp/e.h5"
expect 2 "--holdout-out: $tmp/./e.h5 is also --out" "$meridian" "${hold[@]}" --holdout 20 --holdout-out "$tmp/./e.h5" --out "$tmp/e.h5"
# Detection (any input): seed 3 holds out c.bmp, whose bad label line skips it; the held-out file
# would be empty, so neither file is left, though --out's was complete.
expect 2 "prep: no input could be read (1 skipped" run "${yolo[@]}" --holdout 1 --seed 3 --holdout-out "$tmp/v.h5" --out "$tmp/e.h5"
for f in e.h5 e.h5.tmp e.h5.tmp.tmp v.h5 v.h5.tmp v.h5.tmp.tmp; do
  [[ ! -e $tmp/$f ]] || fail "a refused or failed --holdout left $tmp/$f"
done

# --out naming a directory, with or without --overwrite.
for over in "" --overwrite; do
  expect 2 "$tmp/none: is a directory; --out names the dataset file to write" \
    "$meridian" "${it[@]}" --captions "$tmp/caps.csv" --out "$tmp/none" $over
done

# prep and bench list their commands.
expect 0 "prep synthetic" "$meridian" prep --help
for want in "prep image-text" "prep detection" "prep text"; do grep -qF "$want" "$tmp/o" || fail "prep --help lacks $want"; done
# Each kind lists only its own options, and --size says what it does for that kind.
expect 0 "letterbox" "$meridian" prep detection --help
grep -qE -- "--(captions-per-image|context-length|tokenizer|vocab-size)" "$tmp/o" && fail "prep detection --help lists caption or tokenizer options"
grep -q "center-cropped" "$tmp/o" && fail "prep detection --help says center-cropped (it letterboxes)"
expect 0 "--tokenizer" "$meridian" prep text --help
for want in --holdout --holdout-out --seed; do grep -qF -- "$want" "$tmp/o" || fail "prep text --help lacks $want"; done
grep -qE -- "--(size|encode|captions-per-image|context-length|part-size)" "$tmp/o" && fail "prep text --help lists image or caption options"
expect 0 "center-cropped" "$meridian" prep image-text --help
for want in --captions-per-image --tokenizer --encode; do grep -qF -- "$want" "$tmp/o" || fail "prep image-text --help lacks $want"; done
expect 2 "captions-per-image" "$meridian" prep detection --images "$tmp/images" --captions-per-image 3 --out "$tmp/x.h5"
expect 0 "bench comm" "$meridian" bench --help
expect 2 "prep detection" "$meridian" prep

# Files written without chunks (h5py's default, contiguous layout): inspect reads them, train too.
# Copies with K = 0 captions per image, or fixed-length names, are corrupt: exit 2 naming the dataset.
source "$(dirname "$0")/../ckpt/fixture.sh"  # $tmp/data.h5 (128 scenes) and $tmp/small.yaml
make_fixture "train: {batch: 4, steps: 2}
checkpoint: {every_steps: 0, at_end: false}"
run prep synthetic --kind detection --count 24 --size 32 --out "$tmp/d.h5" >"$tmp/o" 2>&1 || { cat "$tmp/o"; fail "prep synthetic detection"; }
unchunk() {  # SRC DST [no-captions | fixed-names]
  python3 - "$@" <<'PY'
import sys, h5py
src, dst = sys.argv[1:3]
change = sys.argv[3] if len(sys.argv) > 3 else ""
with h5py.File(src, "r") as s, h5py.File(dst, "w") as d:
    def attrs(a, b):
        for k in a.attrs:
            b.attrs.create(k, a.attrs[k], dtype=a.attrs.get_id(k).dtype)
    attrs(s, d)
    def copy(name, obj):
        if isinstance(obj, h5py.Group):
            d.require_group(name)
            return
        data, dtype = obj[()], obj.dtype
        if change == "no-captions" and name in ("tokens", "token_lengths", "captions"):
            data = data[:, :0]
        if change == "fixed-names" and name == "names":
            data, dtype = data.astype("S64"), "S64"
        d.create_dataset(name, data=data, dtype=dtype)  # no chunks
        attrs(obj, d[name])
    s.visititems(copy)
    assert d["images"].chunks is None
PY
}
unchunk "$tmp/data.h5" "$tmp/s_flat.h5" || fail "could not rewrite the image-text file"
unchunk "$tmp/d.h5" "$tmp/d_flat.h5" || fail "could not rewrite the detection file"
unchunk "$tmp/data.h5" "$tmp/s_nocaptions.h5" no-captions || fail "could not write the file without captions"
unchunk "$tmp/d.h5" "$tmp/d_fixed.h5" fixed-names || fail "could not write the file with fixed-length names"
expect 0 "images       128 x 32x32x3 uint8, contiguous" "$meridian" inspect "$tmp/s_flat.h5"
grep -qF "valid image_text dataset" "$tmp/o" && grep -qF "sample synthetic/" "$tmp/o" || { cat "$tmp/o"; fail "inspect of the contiguous image-text file"; }
expect 0 "images       24 x 32x32x3 uint8, contiguous" "$meridian" inspect "$tmp/d_flat.h5"
expect 0 "images       128 x 32x32x3 uint8, chunk [1, 32, 32, 3]" "$meridian" inspect "$tmp/data.h5"
expect 2 "$tmp/s_nocaptions.h5: /tokens: expected [N, K, L] with N = 128, K >= 1 and L >= 1, got [128, 0, 16]" \
  "$meridian" inspect "$tmp/s_nocaptions.h5"
expect 2 "$tmp/d_fixed.h5: /names: expected variable-length strings" "$meridian" inspect "$tmp/d_fixed.h5"
expect 0 "train:" run train --config "$tmp/small.yaml" --data "$tmp/s_flat.h5" --run-dir "$tmp/run" --log-level warn
# A global batch larger than the dataset: the advice names the config key.
expect 2 "$tmp/s_flat.h5: 128 samples are fewer than one global batch (200 = train.batch 100 per rank x 2 ranks); lower train.batch" \
  run train --config "$tmp/small.yaml" --data "$tmp/s_flat.h5" --run-dir "$tmp/run2" --set train.batch=100

# Karpathy-style captions (pretty-printed, as RSICD ships it): the test split, its sentences in order.
cat >"$tmp/dataset_rs.json" <<'JSON'
{
  "images": [
    {"filename": "a.bmp", "imgid": 0, "split": "train", "sentences": [{"raw": "A plane.", "imgid": 0, "sentid": 0}]},
    {"filename": "b.bmp", "imgid": 1, "split": "test",
     "sentences": [{"raw": "Two boats near a pier.", "sentid": 1}, {"raw": "A harbour.", "sentid": 2}]},
    {"filename": "c.bmp", "imgid": 2, "split": "val", "sentences": [{"raw": "Trees.", "sentid": 3}]}
  ],
  "dataset": "rs"
}
JSON
expect 0 "1 of 1 inputs" run prep image-text --images "$tmp/images" --captions "$tmp/dataset_rs.json" --split test \
  --size 32 --context-length 16 --captions-per-image 2 --vocab-size 40 --out "$tmp/karpathy.h5"
python3 - "$tmp/karpathy.h5" <<'PY' || fail "Karpathy captions: wrong names or captions"
import sys, h5py
f = h5py.File(sys.argv[1], "r")
names = [n.decode() for n in f["names"][...]]
captions = [c.decode() for c in f["captions"][0]]
assert names == ["b.bmp"] and captions == ["Two boats near a pier.", "A harbour."], (names, captions)
PY
echo '{"images": [{"filename": "a.bmp", "split": "test"}]}' >"$tmp/bad_rs.json"
expect 2 "$tmp/bad_rs.json: images[0].sentences: expected a list of {\"raw\": caption}" \
  run prep image-text --images "$tmp/images" --captions "$tmp/bad_rs.json" --size 32 --out "$tmp/bad_rs.h5"
# Class folders: the folder is the label (sorted class names), its name in words the caption (AID's
# CamelCase folders and UCM's snake_case alike); a folder without images is named in a warning.
mkdir -p "$tmp/scenes/BareLand" "$tmp/scenes/dense_residential" "$tmp/scenes/Forest"
cp "$tmp/images/a.bmp" "$tmp/scenes/BareLand/"
cp "$tmp/images/b.bmp" "$tmp/images/c.bmp" "$tmp/scenes/dense_residential/"
expect 0 "3 of 3 inputs" run prep image-text --images "$tmp/scenes" --class-folders --size 32 --context-length 16 \
  --captions-per-image 1 --vocab-size 40 --out "$tmp/folders.h5"
grep -qF -- "--class-folders: 1 folder(s) of $tmp/scenes without images, left out of the classes (zero-shot scores over the 2 classes with images): Forest" \
  "$tmp/o" || { cat "$tmp/o"; fail "class folders: the empty folder Forest is not named"; }
python3 - "$tmp/folders.h5" <<'PY' || fail "class folders: wrong labels, classes or captions"
import sys, h5py
f = h5py.File(sys.argv[1], "r")
classes = [c.decode() for c in f["class_names"][...]]
captions = [c[0].decode() for c in f["captions"][...]]
assert classes == ["BareLand", "dense_residential"] and list(f["labels"][...]) == [0, 1, 1], (classes, f["labels"][...])
assert captions == ["bare land", "dense residential", "dense residential"], captions
PY
# --class-names overrides the names made from the folders; a key that is no folder is named.
printf 'dense_residential: apartment blocks\n' >"$tmp/names.yaml"
expect 0 "3 of 3 inputs" run prep image-text --images "$tmp/scenes" --class-folders --class-names "$tmp/names.yaml" \
  --size 32 --context-length 16 --captions-per-image 1 --vocab-size 40 --out "$tmp/renamed.h5"
python3 - "$tmp/renamed.h5" <<'PY' || fail "--class-names: wrong classes or captions"
import sys, h5py
f = h5py.File(sys.argv[1], "r")
classes = [c.decode() for c in f["class_names"][...]]
captions = [c[0].decode() for c in f["captions"][...]]
assert classes == ["BareLand", "apartment blocks"] and list(f["labels"][...]) == [0, 1, 1], classes
assert captions == ["bare land", "apartment blocks", "apartment blocks"], captions
PY
printf 'Desert: desert\n' >"$tmp/bad_names.yaml"
expect 2 "$tmp/bad_names.yaml: Desert: names no class folder of $tmp/scenes" \
  run prep image-text --images "$tmp/scenes" --class-folders --class-names "$tmp/bad_names.yaml" --size 32 --out "$tmp/x.h5"
cp "$tmp/images/a.bmp" "$tmp/scenes/loose.bmp"
expect 2 "$tmp/scenes/loose.bmp: --class-folders: an image outside a class folder" \
  run prep image-text --images "$tmp/scenes" --class-folders --size 32 --out "$tmp/loose.h5"
echo PASS
