#!/usr/bin/env bash
# Usage: cli_mpi_test.sh MPIRUN MERIDIAN [WITH_DATA] — the binary end to end, as a user runs it.
set -u
mpirun=$1 meridian=$2 with_data=${3:-ON}
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

out=$("$meridian" --version) || fail "--version exited $?"
echo "$out"
wants=("meridian " "LibTorch 2." "CUDA     yes: LibTorch's CUDA " ", cuDNN " "NCCL " "HDF5 " "MPI ")
[[ $with_data == ON ]] && wants+=("(parallel)")
for want in "${wants[@]}"; do
  grep -qF "$want" <<<"$out" || fail "--version lacks '$want'"
done

"$meridian" --help | grep -q "bench comm" || fail "--help does not list 'bench comm'"
help=$("$meridian" bench comm --help) || fail "bench comm --help exited $?"
for want in "--min-bytes" "(default: 8)" "--max-bytes" "(default: 256M)" "--comm-timeout" "2(n-1)/n"; do
  grep -qF -- "$want" <<<"$help" || fail "bench comm --help lacks '$want'"
done

"$meridian" bench comm --bogus >"$tmp/o" 2>&1; rc=$?
[[ $rc -eq 2 ]] || fail "unknown option: exit $rc, expected 2"
for bad in "--comm-timeout 0" "--comm-timeout nan" "--log-level loud" "--device tpu"; do
  # shellcheck disable=SC2086
  "$meridian" info $bad >"$tmp/o" 2>&1; rc=$?
  [[ $rc -eq 2 ]] || { cat "$tmp/o"; fail "info $bad: exit $rc, expected 2"; }
done
MERIDIAN_MPI_SEGMENT_BYTES=4X "$mpirun" --oversubscribe -np 2 -x MERIDIAN_MPI_SEGMENT_BYTES "$meridian" bench comm \
  --max-bytes 64 >"$tmp/o" 2>&1; rc=$?
[[ $rc -eq 2 ]] && grep -q "MERIDIAN_MPI_SEGMENT_BYTES: '4X'" "$tmp/o" || { cat "$tmp/o"; fail "bad MERIDIAN_MPI_SEGMENT_BYTES: exit $rc"; }
MERIDIAN_MPI_WAIT=spin "$mpirun" --oversubscribe -np 2 -x MERIDIAN_MPI_WAIT "$meridian" bench comm --max-bytes 8 \
  >"$tmp/o" 2>&1
rc=$?
[[ $rc -eq 2 ]] && grep -q "MERIDIAN_MPI_WAIT: expected block or poll, got 'spin'" "$tmp/o" ||
  { cat "$tmp/o"; fail "bad MERIDIAN_MPI_WAIT: exit $rc"; }
# poll on one rank and block on the other would hang (nonblocking collectives never match blocking
# ones). Explicit on both sides: the environment this test runs in may set it.
"$mpirun" --oversubscribe -np 1 -x MERIDIAN_MPI_WAIT=poll "$meridian" bench comm --max-bytes 8 : \
  -np 1 -x MERIDIAN_MPI_WAIT=block "$meridian" bench comm --max-bytes 8 >"$tmp/o" 2>&1
rc=$?
[[ $rc -eq 2 ]] && grep -q "MERIDIAN_MPI_WAIT differs between ranks" "$tmp/o" ||
  { cat "$tmp/o"; fail "MERIDIAN_MPI_WAIT on one rank only: exit $rc"; }
"$meridian" frobnicate >"$tmp/o" 2>&1; rc=$?
[[ $rc -eq 2 ]] && grep -q "unknown command 'frobnicate'" "$tmp/o" || fail "unknown command: exit $rc"
"$mpirun" --oversubscribe -np 2 "$meridian" bench comm --ops alltoall >"$tmp/o" 2>&1; rc=$?
cat "$tmp/o"
[[ $rc -eq 2 ]] && grep -q "unknown collective 'alltoall'" "$tmp/o" || fail "bad --ops under mpirun: exit $rc"

# (Without the suite's OMP_NUM_THREADS: the choice from the machine's cores is what is checked.)
out=$(env -u OMP_NUM_THREADS "$mpirun" --oversubscribe -np 2 "$meridian" info --run-dir "$tmp/run") || fail "info exited $?"
echo "$out"
[[ $(grep -cE '^\S+ +[01] +[01] +cpu +[0-9]+ +[0-9]+$' <<<"$out") -eq 2 ]] || fail "info: expected one row per rank"
# and why each rank has its threads: 2 ranks of one machine share its cores.
[[ $(grep -cE "^rank [01] threads [0-9]+: [0-9]+ cores on this machine for 2 ranks of the job" <<<"$out") -eq 2 ]] ||
  fail "info: no line per rank saying why it has its threads"
[[ -f $tmp/run/logs/rank_0.log && -f $tmp/run/logs/rank_1.log ]] || fail "no per-rank log files in --run-dir"
# The device: this suite runs on CPU ranks. --device auto says why it chose the CPU; --device cuda is
# refused on every rank (exit 2), naming the device and what CUDA found.
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  echo "this machine has a GPU: the no-GPU checks of --device auto and --device cuda are skipped"
else
  echo "no GPU on this machine: --device auto must choose the CPU and say why, --device cuda must be refused"
  [[ $(grep -cE "^rank [01] device cpu: --device auto found no CUDA device \(.+\)$" <<<"$out") -eq 2 ]] ||
    fail "info: no line per rank saying why its device is the CPU"
  "$mpirun" --oversubscribe -np 2 "$meridian" info --device cuda >"$tmp/o" 2>&1; rc=$?
  [[ $rc -eq 2 ]] || { cat "$tmp/o"; fail "--device cuda without a GPU: exit $rc, expected 2"; }
  grep -qE -- "--device cuda: no CUDA device is visible on \S+ \(.+\)" "$tmp/o" || { cat "$tmp/o"; fail "--device cuda: no message naming the device and what was found"; }
  grep -m1 -E -- "--device cuda: no CUDA device" "$tmp/o"
fi

out=$("$mpirun" --oversubscribe -np 2 "$meridian" bench comm --min-bytes 4 --max-bytes 4M --factor 16 \
      --ops allreduce,broadcast,allgather,reduce_scatter --dtypes float32,bfloat16,int64 --iters 2 --warmup 1 \
      --json "$tmp/bench.json") || fail "bench comm exited $?"
echo "$out"
grep -q "# PASS: 0 wrong elements" <<<"$out" || fail "bench comm did not pass"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['ranks']==2 and len(d['rows'])>=20 and all(r['wrong']==0 for r in d['rows'])" \
  "$tmp/bench.json" || fail "bad --json output"
# bench ddp on a small model, with a trace that Perfetto / chrome://tracing can load: one JSON
# object with traceEvents, complete events (ph X) with ts/dur/pid/tid from both ranks, the
# compute spans and every bucket's allreduce.
out=$("$mpirun" --oversubscribe -np 2 "$meridian" bench ddp --params 200K --depth 4 --batch 8 --steps 3 --warmup 1 \
      --bucket-mb 0.2 --trace "$tmp/trace.json") || fail "bench ddp exited $?"
echo "$out"
grep -q "ddp, reduction overlaps backward" <<<"$out" && grep -q "ddp, reduction after backward" <<<"$out" || fail "bench ddp table"
python3 - "$tmp/trace.json" <<'PY' || fail "invalid trace"
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
spans = [e for e in ev if e["ph"] == "X"]
assert all(isinstance(e[k], (int, float)) for e in spans for k in ("ts", "dur", "pid", "tid")), "bad span fields"
assert {e["pid"] for e in spans} == {0, 1}, "expected both ranks"
names = {e["name"] for e in spans}
for want in ("ddp forward", "ddp backward", "ddp optimizer", "wait for gradients"):
    assert want in names, want
assert sum(1 for n in names if n.startswith("allreduce bucket")) >= 2, "expected several buckets"
assert any(e["ph"] == "M" and e["name"] == "thread_name" for e in ev), "lanes unnamed"
print("trace ok:", len(spans), "spans")
PY

if [[ $with_data == ON ]]; then
  # Datasets of every kind through the binary; inspect refuses a file that is not one.
  for kind in image-text detection text; do
    "$mpirun" --oversubscribe -np 2 "$meridian" prep synthetic --kind $kind --count 24 --size 32 --vocab-size 1000 \
      --context-length 32 --out "$tmp/$kind.h5" >"$tmp/o" 2>&1 || { cat "$tmp/o"; fail "prep synthetic --kind $kind"; }
    "$meridian" inspect "$tmp/$kind.h5" | grep -q "valid ${kind/-/_} dataset" || fail "inspect $kind"
  done
  # bench train with bf16 gradient reduction in small buckets and a trace of both ranks' steps.
  out=$("$mpirun" --oversubscribe -np 2 "$meridian" bench train --config "$(dirname "$0")/../../jobs/configs/siglip-tiny.yaml" \
        --data "$tmp/image-text.h5" --threads 1 --set model.image_size=32 --set model.patch=8 \
        --set model.vocab_size=1000 --set train.batch=4 --set train.steps=4 --set comm.grad_dtype=bf16 \
        --set comm.bucket_mb=0.5 --trace "$tmp/train-trace.json" 2>&1) || { echo "$out"; fail "bench train exited $?"; }
  grep -q "bench train: 2 ranks, " <<<"$out" || { echo "$out"; fail "bench train: no result line"; }
  grep -qE "gradients: reduced in bfloat16 during backward, [0-9]+ buckets of 0.5 MB" <<<"$out" ||
    { echo "$out"; fail "bench train: comm.grad_dtype / comm.bucket_mb not in effect"; }
  python3 - "$tmp/train-trace.json" <<'PY' || fail "invalid bench train trace"
import json, sys
spans = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"]
assert {e["pid"] for e in spans} == {0, 1}, "expected both ranks"
names = {e["name"] for e in spans}
for want in ("data", "forward", "backward", "exposed comm", "optimizer", "wait for gradients", "allreduce bucket 0"):
    assert want in names, want
assert sum(1 for e in spans if e["name"] == "backward" and e["pid"] == 0) == 4, "one backward per step"
print("train trace ok:", len(spans), "spans")
PY
  # `meridian model`: every task's model from its config alone; the rows add up to the total, and
  # lm-tiny's total is its closed form by hand (embedding 512*64; per layer q 64*64, k and v 64*32,
  # o 64*64, MLP 3*64*172, norms 2*64; final norm 64; head tied).
  configs=$(dirname "$0")/../../jobs/configs
  for config in detect-synthetic lm-tiny siglip-tiny; do
    "$meridian" model --config "$configs/$config.yaml" >"$tmp/model_$config" 2>&1 ||
      { cat "$tmp/model_$config"; fail "model --config $config.yaml exited"; }
    python3 - "$tmp/model_$config" <<'PY' || { cat "$tmp/model_$config"; fail "model $config: rows do not add up"; }
import re, sys
lines = open(sys.argv[1]).read().splitlines()
rows = [int(l.split()[-1].replace(",", "")) for l in lines[1:-1]]
total = int(re.search(r"summary: [\d,]+ modules, ([\d,]+) parameters", lines[-1]).group(1).replace(",", ""))
assert rows and sum(rows) == total, (sum(rows), total)
PY
  done
  lm_total=$((512 * 64 + 2 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 172 + 2 * 64) + 64))
  grep -q "lm summary: .* $(python3 -c "print(f'{$lm_total:,}')") parameters" "$tmp/model_lm-tiny" ||
    { cat "$tmp/model_lm-tiny"; fail "model lm-tiny: not $lm_total parameters"; }
  "$meridian" model --config "$configs/lm-tiny.yaml" --image-size 640 >"$tmp/o" 2>&1; rc=$?
  [[ $rc -eq 2 ]] && grep -q -- "--image-size does not apply to task lm" "$tmp/o" || { cat "$tmp/o"; fail "model --image-size for lm: exit $rc"; }

  # A model YAML whose largest stride (2^13) does not divide the image size: exit 2 naming it.
  { echo "backbone:"; echo "  - [-1, 13, Conv, [16, 3, 2]]"; echo "head:"; echo "  - [[0], 1, Detect, [nc]]"; } >"$tmp/deep.yaml"
  printf 'task: {name: detect}\nmodel: {yaml: %s}\n' "$tmp/deep.yaml" >"$tmp/deep_run.yaml"
  "$meridian" model --config "$tmp/deep_run.yaml" >"$tmp/o" 2>&1; rc=$?
  [[ $rc -eq 2 ]] && grep -q "image size 640 is not a multiple of the model's largest stride 8192" "$tmp/o" ||
    { cat "$tmp/o"; fail "model with a stride above the image size: exit $rc"; }

  echo "not a dataset" >"$tmp/junk.h5"
  "$meridian" inspect "$tmp/junk.h5" >"$tmp/o" 2>&1; rc=$?
  [[ $rc -eq 2 ]] && grep -q "junk.h5: file: not an HDF5 file" "$tmp/o" || { cat "$tmp/o"; fail "inspect of junk: exit $rc"; }
fi
echo PASS
