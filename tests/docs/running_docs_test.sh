#!/usr/bin/env bash
# Usage: running_docs_test.sh MPIRUN MERIDIAN SOURCE_DIR — docs/running.md's walkthroughs run as
# written: every bash block marked `<!-- docs-test: NAME -->` runs, in the page's order, with
# `bash -euo pipefail` in one working directory, where build/meridian is the binary under test, jobs/
# the source tree's, and what the page tells users to download are small stand-ins in their published
# layouts: models/siglip-base-256 and models/Llama-2-7b-hf (tests/models/hf_siglip.py and
# hf_llama.py), yolo11n.safetensors (tests/models/ultralytics_yolo.py), ucm/, AID/, queries.txt,
# alpaca_data.json and datasets/mydata/ (tests/docs/standins.py). mpirun gets --oversubscribe. A block
# that fails, or a marked block the page lost (the list of names below), fails the test naming it.
# Blocks that need a cluster, Slurm, a download or hours (unmarked) are covered by the cluster and
# Slurm tests, or not at all.
set -u
mpirun=$1 meridian=$2 src=$3
# shellcheck source=tests/mpi_script_lib.sh
source "$src/tests/mpi_script_lib.sh"
work=$tmp/work
mkdir -p "$work/build" "$work/models"
ln -s "$meridian" "$work/build/meridian"
ln -s "$src/jobs" "$work/jobs"
py=python3
$py "$src/tests/models/hf_siglip.py" make "$work/models/siglip-base-256" --seed 1 --dtype bf16 >/dev/null ||
  fail "the SigLIP stand-in"
$py "$src/tests/models/hf_llama.py" make "$work/models/Llama-2-7b-hf" --seed 1 --dtype bf16 >/dev/null ||
  fail "the Llama stand-in"
# Llama-2's context (RoPE has no table to resize): the page evaluates windows of 512 tokens.
$py -c 'import json, sys; p = sys.argv[1]; c = json.load(open(p)); c["max_position_embeddings"] = 4096; json.dump(c, open(p, "w"))' \
  "$work/models/Llama-2-7b-hf/config.json"
$py "$src/tests/models/ultralytics_yolo.py" make "$tmp/yolo" --yaml "$src/jobs/configs/ultralytics/yolo11.yaml" --scale n \
  --nc 80 --seed 5 --size 32 >/dev/null || fail "the YOLO stand-in"
cp "$tmp/yolo/model.safetensors" "$work/yolo11n.safetensors"
$py "$src/tests/docs/standins.py" "$work" || fail "the data stand-ins"

# The marked blocks, in order: NAME<TAB>first line number, then the block's lines, then a line "@@END".
$py - "$src/docs/running.md" >"$tmp/blocks" <<'PY' || fail "cannot read the marked blocks of docs/running.md"
import re, sys
lines = open(sys.argv[1]).read().split("\n")
for i, line in enumerate(lines):
    m = re.fullmatch(r"<!-- docs-test: ([a-z0-9-]+) -->", line.strip())
    if not m:
        continue
    if i + 1 >= len(lines) or lines[i + 1].strip() != "```bash":
        sys.exit(f"docs/running.md line {i + 1}: the mark '{m[1]}' is not right above a ```bash block")
    end = next(j for j in range(i + 2, len(lines)) if lines[j].strip() == "```")
    print(f"@@BLOCK {m[1]} {i + 3}")
    print("\n".join(lines[i + 2:end]))
    print("@@END")
PY
# The marked blocks the page must have, in its order: a block that vanished, was renamed or moved fails
# the test naming it (a new one must be added here).
expected="llama-data siglip-data siglip-published siglip-train siglip-report siglip-export siglip-embed yolo-data
yolo-published"
found=$(sed -n 's/^@@BLOCK \([^ ]*\) .*/\1/p' "$tmp/blocks")
[[ $(echo $found) == "$(echo $expected)" ]] ||
  fail "docs/running.md's marked blocks are '$(echo $found)', expected '$(echo $expected)'$(
    for b in $expected; do grep -qx "$b" <<<"$found" || printf '; missing: %s' "$b"; done)"
ran=0
while IFS= read -r header; do
  [[ $header == "@@BLOCK "* ]] || continue
  read -r _ name line <<<"$header"
  body=$(sed -n "/^@@BLOCK $name $line\$/,/^@@END\$/p" "$tmp/blocks" | sed '1d;$d')
  started=$(date +%s)
  rc=0
  out=$(cd "$work" && MPIRUN=$mpirun bash -euo pipefail -c "mpirun() { command \"\$MPIRUN\" --oversubscribe \"\$@\"; }
$body" 2>&1 </dev/null) || rc=$?
  ((rc == 0)) || { echo "$out" | tail -25; fail "docs/running.md block '$name' (line $line) exited $rc"; }
  echo "ok: block '$name' (docs/running.md line $line) in $(( $(date +%s) - started )) s"
  ran=$((ran + 1))
done <"$tmp/blocks"
# What the blocks were to make is there.
for f in alpaca.h5 alpaca-val.h5 ucm-train.h5 aid.h5 aid-airport.csv runs/ucm-ft/checkpoints/best.h5 ucm-ft.html \
  models/ucm-ft/config.json ucm-images.h5 queries.h5 det-train.h5 det-val.h5 predictions/labels/img_0.txt; do
  [[ -e $work/$f ]] || fail "after the blocks, $f is missing"
done
echo "$ran marked blocks of docs/running.md ran as written"
echo PASS
