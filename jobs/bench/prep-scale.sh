#!/usr/bin/env bash
# Prep at scale on 2 ranks: a synthetic image-text set of 25,000 and 100,000 images at 256 px
# (--encode jpeg), as one file and as files of 25,000 (--out NAME.json); the same from a captions
# file of as many entries (UC Merced's images over and over, when ../shared/data has them); then
# webdataset shards made from the 100,000 (10 shards of 10,000: key.jpg + key.txt, written by Python's tarfile from the
# prepared file) prepared again with --webdataset. Prints per run: images/s (prep's own line), the
# peak resident memory of each rank (GNU time) and the output size.
# Usage: jobs/bench/prep-scale.sh [build dir (default build)]   Environment: BENCH_DIR (default
# /tmp/meridian-bench-prep; needs about 6 GB), COUNTS (default "25000 100000").
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/jobs/python-env.sh"
bin=${1:-$root/build}/meridian
[[ -x $bin ]] || { echo "prep-scale.sh: $bin not found; build first" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dir=${BENCH_DIR:-/tmp/meridian-bench-prep}
counts=${COUNTS:-25000 100000}
mkdir -p "$dir"
run() {  # run LABEL OUT ARGS...: prep on 2 ranks under GNU time
  local label=$1 out=$2; shift 2
  rm -rf "$out" "${out%.json}"-0*.h5
  local log
  log=$(mpirun --oversubscribe -np 2 /usr/bin/time -f "peak %M KB" "$bin" prep "$@" --out "$out" --log-level warn 2>&1)
  local files=("$out") size
  shopt -s nullglob
  files+=("${out%.json}"-0*.h5)
  shopt -u nullglob
  size=$(du -cb "${files[@]}" | tail -1 | cut -f1)
  echo "$label: $(grep -oE '[0-9]+ of [0-9]+ inputs in [0-9.]+ s \([0-9.]+ inputs/s\)' <<<"$log"), peak RSS per rank $(grep -oE 'peak [0-9]+' <<<"$log" | awk '{print int($2 / 1024) " MB"}' | paste -sd/ -), output $(awk -v b="$size" 'BEGIN {printf "%.2f GB", b / 1e9}')"
}
for n in $counts; do
  run "synthetic $n, one file" "$dir/syn$n.h5" synthetic --count "$n" --size 256 --encode jpeg
  run "synthetic $n, files of 25000" "$dir/syn$n.json" synthetic --count "$n" --size 256 --encode jpeg --part-size 25000
done
ucm=$root/../shared/data/ucm-captions
if [[ -f $ucm/captions.jsonl ]]; then  # a captions file of N entries: UCM's 2,100 images over and over
  for n in $counts; do
    python3 - "$ucm/captions.jsonl" "$dir/captions$n.jsonl" "$n" <<'PY'
import json, sys
src = [json.loads(l) for l in open(sys.argv[1])]
with open(sys.argv[2], "w") as out:
    for i in range(int(sys.argv[3])):
        e = dict(src[i % len(src)]); e.pop("split", None); out.write(json.dumps(e) + "\n")
PY
    run "captions file $n (UCM images repeated), one file" "$dir/cap$n.h5" image-text --images "$ucm" \
      --captions "$dir/captions$n.jsonl" --encode jpeg --size 256
    run "captions file $n (UCM images repeated), files of 25000" "$dir/cap$n.json" image-text --images "$ucm" \
      --captions "$dir/captions$n.jsonl" --encode jpeg --size 256 --part-size 25000
  done
fi
last=${counts##* }
mkdir -p "$dir/shards"
python3 - "$dir/syn$last.h5" "$dir/shards" <<'PY'
import io, sys, tarfile, h5py
f = h5py.File(sys.argv[1], "r")
off, data, caps = f["image_offsets"][:], f["image_bytes"], f["captions"]
n, per = len(off) - 1, 10000
for s in range(0, n, per):
    with tarfile.open(f"{sys.argv[2]}/{s // per:05d}.tar", "w") as t:
        for i in range(s, min(n, s + per)):
            for name, blob in ((f"{i:09d}.jpg", data[off[i]:off[i + 1]].tobytes()), (f"{i:09d}.txt", caps[i, 0])):
                info = tarfile.TarInfo(name); info.size = len(blob); t.addfile(info, io.BytesIO(blob))
PY
shards=$(ls "$dir/shards" | wc -l)
run "webdataset $last ($shards shards), one file" "$dir/wds$last.h5" image-text \
  --webdataset "$dir/shards/{00000..$(printf %05d $((shards - 1)))}.tar" --encode jpeg --size 256
