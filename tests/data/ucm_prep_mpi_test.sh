#!/usr/bin/env bash
# Usage: ucm_prep_mpi_test.sh MPIRUN MERIDIAN SOURCE_DIR
# UC Merced captions -> dataset on 2 ranks; `inspect` must validate it: 2,100 images, 10,500
# captions, 21 classes of 100; h5ls must read it. Exit 77 (ctest: skipped) when the data is absent.
set -u
mpirun=$1 meridian=$2 src=$3
ucm=${MERIDIAN_UCM_DIR:-}
for candidate in "$src/../shared/data/ucm-captions" /work/shared/data/ucm-captions; do
  [[ -z $ucm && -f $candidate/captions.jsonl ]] && ucm=$candidate
done
if [[ -z $ucm ]]; then
  echo "SKIPPED: UC Merced captions not found (set MERIDIAN_UCM_DIR); this test did NOT run"
  exit 77
fi
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

"$mpirun" --oversubscribe -np 2 "$meridian" prep image-text --images "$ucm" --captions "$ucm/captions.jsonl" \
  --out "$tmp/ucm.h5" --size 256 --vocab-size 2000 --context-length 32 || fail "prep exited $?"
[[ -f $tmp/ucm.h5 && ! -e $tmp/ucm.h5.tmp ]] || fail "no output, or a temporary file left behind"

out=$("$meridian" inspect "$tmp/ucm.h5" --samples 2) || fail "inspect exited $?"
echo "$out"
grep -q "valid image_text dataset" <<<"$out" || fail "not reported valid"
grep -qE "images +2100 x 256x256x3 uint8" <<<"$out" || fail "expected 2100 images of 256x256x3"
grep -qE "captions +10500 \(5 per image\)" <<<"$out" || fail "expected 10500 captions"
grep -qE "classes +21$" <<<"$out" || fail "expected 21 classes"
[[ $(grep -cE "^    [a-z]+ +100$" <<<"$out") -eq 21 ]] || fail "expected 100 images in each class"

h5ls "$tmp/ucm.h5" | tee "$tmp/ls"
for d in images tokens token_lengths captions names labels class_names tokenizer; do
  grep -q "^$d " "$tmp/ls" || fail "h5ls does not list /$d"
done

# One split only, and a file refused when it exists.
"$mpirun" --oversubscribe -np 2 "$meridian" prep image-text --images "$ucm" --captions "$ucm/captions.jsonl" \
  --out "$tmp/ucm.h5" --split test --vocab-size 500 >"$tmp/o" 2>&1 && fail "an existing output was overwritten"
grep -q "exists (pass --overwrite" "$tmp/o" || { cat "$tmp/o"; fail "no clear message for an existing output"; }
"$mpirun" --oversubscribe -np 2 "$meridian" prep image-text --images "$ucm" --captions "$ucm/captions.jsonl" \
  --out "$tmp/test.h5" --split test --size 64 --vocab-size 500 || fail "prep --split test exited $?"
"$meridian" inspect "$tmp/test.h5" | grep -qE "images +210 x 64x64x3" || fail "expected the 210 test images"
# The original TIFFs (uncompressed RGB TIFF decoding), indexed by a CSV made here.
{
  echo "image,caption,class"
  for f in "$ucm"/tiff-originals/*.tif; do b=$(basename "$f" .tif); echo "tiff-originals/$b.tif,\"an aerial image of ${b%00}\",${b%00}"; done
} >"$tmp/tiff.csv"
"$mpirun" --oversubscribe -np 2 "$meridian" prep image-text --images "$ucm" --captions "$tmp/tiff.csv" --strict \
  --out "$tmp/tiff.h5" --size 128 --vocab-size 100 || fail "prep of the TIFF originals exited $?"
"$meridian" inspect "$tmp/tiff.h5" | grep -qE "images +21 x 128x128x3" || fail "expected the 21 TIFF images"
echo PASS
