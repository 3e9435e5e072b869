#!/usr/bin/env bash
# GPU check: one command on a lent GPU machine (one H100/H200, 16 cores, python3 with a CUDA PyTorch,
# no network, no MPI) that builds the whole project, runs its GPU tests, trains every task on the GPU
# in train.precision auto (bf16 on an H100), an lm in fp16 with its loss scale, and records what it
# measured. Nothing is downloaded: the Debian packages come carried in
# .gpudeps/ (jobs/gpu-deps.sh), the data is drawn by `meridian prep synthetic`.
#
# Steps (each with a timeout; all together under --budget, 470 s by default; a step whose input
# failed is skipped, the others still run):
#   machine        nvidia-smi, python3's torch, nproc
#   deps           source jobs/gpu-deps.sh (Open MPI, HDF5, ... unpacked; MERIDIAN_GPU_CMAKE_ARGS)
#   configure      cmake -G Ninja -DCMAKE_BUILD_TYPE=Release $MERIDIAN_GPU_CMAKE_ARGS  (the whole project)
#   build          cmake --build $BUILD -j $(nproc)
#   version, info  meridian --version (its LibTorch track: gpu-check.json's version.track); mpirun -np 1 meridian info
#   gpu-build      meridian info --device auto: the verdict of this build on the GPU (comm/gpu_build.h): the driver's CUDA and the GPU's
#                  compute capability, read from the real device, must pass ("runs on ..."; a dry run: "no
#                  NVIDIA GPU")
#   unit-tests     tests/meridian_unit_tests
#   comm-tests, parallel-tests, train-tests
#                  the MPI test binaries, 1 rank on cuda:0 (MERIDIAN_TEST_DEVICE=cuda: NCCL too)
#   rng-tests      the CUDA generator's state through a checkpoint (ckpt tests, DeviceRng; CPU ranks)
#   bench-comm     bench comm --backend nccl (1 rank)
#   prep-*         synthetic data, 8 ranks on the CPU: image-text 256 px, detection 640 px, instruction text
#   bench-siglip   bench train, SigLIP base/16 at 256 px (jobs/configs/siglip-base.yaml), auto (bf16), batch 128
#   bench-yolo     bench train, YOLO12s at 640 px (jobs/configs/yolo-coco.yaml with model.yaml yolo12s.yaml,
#                  train.epochs 0, data.close_mosaic 0), auto, batch 32 (x accumulate 2: Ultralytics' 64)
#   bench-llama    bench train, Llama-style 1B (jobs/configs/llama-1b.yaml: optim.zero 3,
#                  train.activation_checkpointing true), auto, batch 8 x 1024 tokens
#                  (bench train: 30 steps, the first not measured; samples/s, step-time breakdown, MFU
#                  against the GPU's published bf16 peak, or a measured GEMM rate where it is not known;
#                  --count-syncs: the host's waits for the GPU per step, LibTorch's CUDA sync debug
#                  mode; goal at most 1 for SigLIP, 2 for YOLO: host_syncs_within_goal in the JSON)
#   resume-*       an fp16 lm run (about 30M parameters; a dynamic loss scale that grows every 3 steps)
#                  SIGKILLed after a checkpoint and resumed (--resume auto): its last checkpoint's /model,
#                  /optim and /loss_scale and its metrics.csv losses and loss scales must be bit-identical
#                  to an uninterrupted run's (h5py)
#   train-siglip, train-yolo   4 steps each with a checkpoint at the end, for:
#   images, eval-*, predict-*, generate   on the GPU with those checkpoints and the resume run's
# Results: $OUT (default /tmp/gpu-check): gpu-check.json (per step: status, seconds, figures such as
# samples/s and MFU), gpu-check.log (every step's output) and bench-nccl.json. Exit 0 when every step
# passed, 1 otherwise (a line `FAIL: ...` per failed step).
#
# Usage: bash jobs/gpu-check.sh [options]          (from anywhere; paths come from this file's place)
#   --dry-run         rehearse on a machine without a GPU: the same steps with --device cpu and tiny
#                     sizes; the NCCL bench and MERIDIAN_TEST_DEVICE=cuda are left out, and so are the
#                     watchdog's unit tests (a time window: the suite runs them alone)
#   --build-dir DIR   use the build in DIR instead of building (and, with --dry-run, no jobs/gpu-deps.sh)
#   --no-build        use the build in $BUILD as it is
#   --out DIR         where the results go (default $OUT, else /tmp/gpu-check)
#   --budget S        seconds for the whole check (default 470; 240 with --dry-run, which takes about 60)
#   --mpirun PATH     the mpirun to use (default $MPIRUN, else mpirun on the PATH)
#   --keep            keep the work directory (datasets, runs, checkpoints)
# Environment: BUILD (default /tmp/meridian-gpu-build), OUT, MPIRUN, PYTHON (with h5py and numpy; default
# python3, else $MERIDIAN_VENV/bin/python3 when python3 lacks them), WORK (default: a new directory under /tmp, removed at the end unless --keep).
# ctest (a dry run with the suite's own binary): bash jobs/gpu-check.sh --dry-run --build-dir <build>
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DRY=0 BUILD_MODE=build KEEP=0 BUDGET=""
BUILD=${BUILD:-/tmp/meridian-gpu-build}
OUT=${OUT:-/tmp/gpu-check}
MPIRUN=${MPIRUN:-mpirun}
PYTHON=${PYTHON:-}
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; }
while (($#)); do
  case $1 in
    --dry-run) DRY=1 ;;
    --build-dir) [[ $# -ge 2 ]] || { echo "FAIL: --build-dir needs a directory"; exit 2; }
      BUILD=$2 BUILD_MODE=reuse; shift ;;
    --no-build) BUILD_MODE=reuse ;;
    --out) [[ $# -ge 2 ]] || { echo "FAIL: --out needs a directory"; exit 2; }
      OUT=$2; shift ;;
    --budget) [[ $# -ge 2 && $2 =~ ^[0-9]+$ ]] || { echo "FAIL: --budget needs seconds"; exit 2; }
      BUDGET=$2; shift ;;
    --mpirun) [[ $# -ge 2 ]] || { echo "FAIL: --mpirun needs a path"; exit 2; }
      MPIRUN=$2; shift ;;
    --keep) KEEP=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "FAIL: unknown argument '$1' (see --help)"; exit 2 ;;
  esac
  shift
done
[[ -n $BUDGET ]] || { ((DRY)) && BUDGET=240 || BUDGET=470; }
if [[ -z $PYTHON ]]; then  # python3, else meridian's environment (jobs/setup-node.sh) where python3 lacks h5py
  PYTHON=python3
  venv_python=${MERIDIAN_VENV:-/opt/meridian/venv}/bin/python3
  if ! python3 -c 'import h5py, numpy' 2>/dev/null && [[ -x $venv_python ]]; then PYTHON=$venv_python; fi
fi
BUILD=$(mkdir -p "$BUILD" && cd "$BUILD" && pwd) || { echo "FAIL: cannot use the build directory $BUILD"; exit 2; }
mkdir -p "$OUT" || { echo "FAIL: cannot create $OUT"; exit 2; }
OUT=$(cd "$OUT" && pwd)
WORK=${WORK:-$(mktemp -d /tmp/gpu-check-work.XXXXXX)}
mkdir -p "$WORK/out" || { echo "FAIL: cannot create $WORK"; exit 2; }
LOG=$OUT/gpu-check.log JSON=$OUT/gpu-check.json STEPS=$WORK/steps.tsv
: >"$LOG" && : >"$STEPS" && rm -f "$JSON" "$OUT/bench-nccl.json"
cleanup() {
  local p
  for p in ${BG_PIDS:-}; do kill -9 "$p" 2>/dev/null; done
  ((KEEP)) || rm -rf "$WORK"
}
trap cleanup EXIT
START=$(date +%s)
DEADLINE=$((START + BUDGET))
say() { echo "$*" | tee -a "$LOG"; }

# ---------------------------------------------------------------------------------------------------
# The sizes. GPU: what the check is for. Dry run: the same configs, shrunk to seconds on 2 CPU cores.
BIN=$BUILD/meridian
if ((DRY)); then
  DEV=cpu PREP_NP=2 PREC=auto  # float32 on a CPU without bf16 units (its emulated bf16 is the slow path)
  N_IT=64 IT_SIZE=32 IT_CTX=16 N_DET=32 DET_SIZE=64 N_TEXT=200
  BENCH_STEPS=3 TRAIN_STEPS=2
  SIGLIP_SETS=(--set model.image_size=32 --set model.patch=8 --set model.context_length=16 --set model.vocab_size=300
    --set model.vision.width=32 --set model.vision.depth=1 --set model.vision.heads=2
    --set model.text.width=32 --set model.text.depth=1 --set model.text.heads=2 --set model.embed=32
    --set train.batch=4)
  YOLO_SETS=(--set model.yaml=yolo12n.yaml --set data.image_size=64 --set train.batch=4 --set data.close_mosaic=0)
  LLAMA_SEQ=64
  LLAMA_SETS=(--set model.dim=64 --set model.layers=2 --set model.heads=4 --set model.kv_heads=2 --set model.hidden=172
    --set model.vocab_size=512 --set model.max_seq_len=64 --set "data.seq_len=$LLAMA_SEQ" --set train.batch=2)
  RESUME_MODEL="{vocab_size: 512, dim: 64, layers: 2, heads: 4, kv_heads: 2, hidden: 172, max_seq_len: 64}"
  RESUME_TRAIN="batch: 4" RESUME_SEQ=64 RESUME_STEPS=12 RESUME_EVERY=4 STALL_MS=60
  T_TEST=60 T_PREP=30 T_BENCH=120 T_TRAIN=120 T_INFER=30  # bench-yolo: 34 s alone, past 60 s beside the suite
else
  DEV=cuda PREP_NP=8 PREC=auto
  N_IT=1024 IT_SIZE=256 IT_CTX=64 N_DET=256 DET_SIZE=640 N_TEXT=6000
  BENCH_STEPS=30 TRAIN_STEPS=4
  SIGLIP_SETS=(--set train.batch=128 --set data.workers=12)
  YOLO_SETS=(--set model.yaml=yolo12s.yaml --set data.image_size=640 --set train.batch=32 --set data.workers=12
    --set data.close_mosaic=0)
  LLAMA_SEQ=1024
  LLAMA_SETS=(--set "data.seq_len=$LLAMA_SEQ" --set train.batch=8)
  RESUME_MODEL="{vocab_size: 8000, dim: 512, layers: 8, heads: 8, kv_heads: 4, hidden: 1376, max_seq_len: 256}"
  RESUME_TRAIN="batch: 8" RESUME_SEQ=256 RESUME_STEPS=24 RESUME_EVERY=8 STALL_MS=100
  T_TEST=120 T_PREP=60 T_BENCH=90 T_TRAIN=90 T_INFER=45
fi
COMMON=(--device "$DEV" --log-level info)
MPI1=("$MPIRUN" --oversubscribe --bind-to none -np 1)

# ---------------------------------------------------------------------------------------------------
# step NAME TIMEOUT [--needs "A B"] [--skip WHY] -- COMMAND...: runs COMMAND with a timeout of at most
# TIMEOUT s and what is left of the budget; its output goes to $WORK/out/NAME.out and the log. Records
# NAME, status (ok, failed, timeout, skipped, no-time), seconds, exit code and a note in $STEPS.
declare -A STATUS=()
FAILED=()
record() {  # record NAME STATUS SECONDS RC NOTE [START END (epoch seconds)]
  STATUS[$1]=$2
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "${5//$'\t'/ }" "${6:-}" "${7:-}" >>"$STEPS"
  case $2 in
    ok | skipped) ;;
    *) FAILED+=("$1") ;;
  esac
}
step() {
  local name=$1 limit=$2 needs="" skip=""
  shift 2
  while [[ $1 != -- ]]; do
    case $1 in
      --needs) needs=$2; shift 2 ;;
      --skip) skip=$2; shift 2 ;;
      *) echo "gpu-check.sh: bad step() call for $name" >&2; exit 2 ;;
    esac
  done
  shift
  local n
  for n in $needs; do
    if [[ ${STATUS[$n]:-} != ok ]]; then
      say "--- $name: skipped (needs $n, which is ${STATUS[$n]:-not run})"
      record "$name" skipped 0 "" "needs $n (${STATUS[$n]:-not run})"
      return 1
    fi
  done
  if [[ -n $skip ]]; then
    say "--- $name: skipped ($skip)"
    record "$name" skipped 0 "" "$skip"
    return 1
  fi
  local now left
  now=$(date +%s)
  left=$((DEADLINE - now))
  if ((left < 5)); then
    say "--- $name: not run: the budget of $BUDGET s is spent"
    record "$name" no-time 0 "" "budget of $BUDGET s spent"
    return 1
  fi
  ((limit > left)) && limit=$left
  say "=== $name (limit ${limit} s, $((now - START)) s in): $*"
  local t0 rc status
  t0=$(date +%s.%N)
  timeout -k 10 "$limit" "$@" >"$WORK/out/$name.out" 2>&1 </dev/null
  rc=$?
  local secs t1
  t1=$(date +%s.%N)
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  cat "$WORK/out/$name.out" >>"$LOG"
  if ((rc == 0)); then
    status=ok
  elif ((rc == 124 || rc == 137)); then
    status=timeout
  else
    status=failed
  fi
  record "$name" "$status" "$secs" "$rc" "" "$t0" "$t1"
  say "--- $name: $status in $secs s (exit $rc)"
  [[ $status == ok ]] || tail -n 15 "$WORK/out/$name.out" | sed 's/^/    | /'
  [[ $status == ok ]]
}

# ---------------------------------------------------------------------------------------------------
say "gpu-check: $( ((DRY)) && echo "DRY RUN (--device cpu, tiny sizes)" || echo "GPU") in $ROOT, build $BUILD," \
  "work $WORK, results $OUT, budget $BUDGET s, $(date -u +%FT%TZ)"

if ((DRY)); then
  step machine 20 -- bash -c 'uname -a; nproc; '"$PYTHON"' -c "import h5py, numpy; print(\"h5py\", h5py.__version__, \"numpy\", numpy.__version__)"'
else
  step machine 60 -- bash -c 'nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv && nproc &&
    '"$PYTHON"' -c "import torch, h5py; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"gpu\", torch.cuda.get_device_name(0), \"h5py\", h5py.__version__)"'
fi

# deps: sourced in this shell (the environment is what the later steps need).
if ((DRY)) && [[ $BUILD_MODE == reuse || ! -d $ROOT/.gpudeps ]]; then
  record deps skipped 0 "" "dry run: this machine's own packages"
  say "--- deps: skipped (dry run: this machine's own packages)"
else
  say "=== deps: source jobs/gpu-deps.sh"
  t0=$(date +%s)
  if source "$ROOT/jobs/gpu-deps.sh" >>"$LOG" 2>&1; then
    record deps ok "$(($(date +%s) - t0))" 0 "MERIDIAN_GPU_CMAKE_ARGS=$MERIDIAN_GPU_CMAKE_ARGS"
    say "--- deps: ok (MERIDIAN_GPU_CMAKE_ARGS=$MERIDIAN_GPU_CMAKE_ARGS)"
  else
    record deps failed "$(($(date +%s) - t0))" 1 "jobs/gpu-deps.sh failed"
    say "--- deps: failed (jobs/gpu-deps.sh; its messages are in $LOG)"
  fi
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

if [[ $BUILD_MODE == build ]]; then
  deps_need=deps
  [[ ${STATUS[deps]} == skipped ]] && deps_need=""  # a dry run builds with this machine's packages
  # A dry run with the carried packages hides this machine's own copies from CMake and pkg-config, so
  # the build uses the unpacked ones, as the GPU machine must.
  HIDE=()
  if ((DRY)) && [[ ${STATUS[deps]} == ok ]]; then
    HIDE=("-DCMAKE_IGNORE_PREFIX_PATH=/usr;/")
    export PKG_CONFIG_LIBDIR=$PKG_CONFIG_PATH
  fi
  # shellcheck disable=SC2086  # MERIDIAN_GPU_CMAKE_ARGS is deliberately word-split
  step configure 120 --needs "$deps_need" -- cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    ${MERIDIAN_GPU_CMAKE_ARGS:-} "${HIDE[@]}"
  step build 420 --needs configure -- cmake --build "$BUILD" -j "$(nproc)"
else
  record configure skipped 0 "" "existing build $BUILD"
  if [[ -x $BIN ]]; then
    record build ok 0 0 "existing build $BUILD (not rebuilt)"
    say "--- build: $BUILD as it is (not rebuilt)"
  else
    record build failed 0 "" "no $BIN"
    say "--- build: failed: there is no $BIN"
  fi
fi

step version 30 --needs build -- "$BIN" --version
step info 60 --needs build -- "${MPI1[@]}" "$BIN" info "${COMMON[@]}"
if ((DRY)); then build_verdict="no NVIDIA GPU"; else build_verdict="runs on"; fi
# shellcheck disable=SC2016  # $@ is the inner shell's
step gpu-build 60 --needs build -- bash -c '"$@" 2>&1 | tee /dev/stderr | grep -qE "^rank 0 gpu build $0"' \
  "$build_verdict" "${MPI1[@]}" "$BIN" info --device auto

# The test binaries: 1 rank, on cuda:0 with NCCL on the GPU; on CPU (MPI backend only) in a dry run.
# A dry run leaves out the watchdog's unit tests: their verdict is a time window (the suite runs them
# alone, unit_tests is RUN_SERIAL), and the dry run is a ctest entry that runs beside other tests.
if ((DRY)); then
  TESTRUN=(env -u MERIDIAN_TEST_DEVICE "${MPI1[@]}")
  UNIT_ARGS=(--gtest_filter=-Watchdog.*)
else
  TESTRUN=(env MERIDIAN_TEST_DEVICE=cuda "${MPI1[@]}" -x MERIDIAN_TEST_DEVICE)
  UNIT_ARGS=()
fi
step unit-tests "$T_TEST" --needs build -- "$BUILD/tests/meridian_unit_tests" "${UNIT_ARGS[@]}"
for t in comm parallel train; do
  step "$t-tests" "$T_TEST" --needs build -- "${TESTRUN[@]}" "$BUILD/tests/meridian_${t}_mpi_tests"
done
# The CUDA generator's state through a checkpoint (RealGpu; its CPU stand-in everywhere). The ranks
# stay on the CPU (the test's small trainer is a CPU one); the generator is the GPU's.
step rng-tests "$T_TEST" --needs build -- env -u MERIDIAN_TEST_DEVICE "${MPI1[@]}" \
  "$BUILD/tests/meridian_ckpt_mpi_tests" --gtest_filter='*DeviceRng*'

# NCCL's collectives on the GPU (1 rank: algorithm bandwidth; the bus factor of 1 rank is 0).
if ((DRY)); then
  step bench-comm 0 --skip "needs a GPU (NCCL)" -- true
else
  step bench-comm 90 --needs build -- "${MPI1[@]}" "$BIN" bench comm --device cuda --backend nccl \
    --ops allreduce,broadcast,allgather,reduce_scatter --dtypes float32,bfloat16 --min-bytes 8 --max-bytes 256M \
    --factor 16 --json "$OUT/bench-nccl.json"
fi

# GPU memory in use, sampled every 0.5 s for the whole check (gpu-check.json: each step's peak).
BG_PIDS=""
if ((!DRY)) && command -v nvidia-smi >/dev/null; then
  while :; do
    echo "$(date +%s.%N) $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null)"
    sleep 0.5
  done >"$WORK/gpu-memory.txt" 2>/dev/null &
  BG_PIDS=$!
fi

# ---------------------------------------------------------------------------------------------------
# Data: drawn on the CPU by several ranks (--device cpu: there is one GPU).
PREP=("$MPIRUN" --oversubscribe --bind-to none -np "$PREP_NP" "$BIN" prep synthetic --device cpu --overwrite)
step prep-image-text "$T_PREP" --needs build -- "${PREP[@]}" --kind image-text --count "$N_IT" --size "$IT_SIZE" \
  --context-length "$IT_CTX" --out "$WORK/it.h5"
step prep-detection "$T_PREP" --needs build -- "${PREP[@]}" --kind detection --count "$N_DET" --size "$DET_SIZE" \
  --out "$WORK/det.h5"
step prep-text "$T_PREP" --needs build -- "${PREP[@]}" --kind text --count "$N_TEXT" --out "$WORK/text.h5"

# ---------------------------------------------------------------------------------------------------
# Throughput and MFU: bench train (no checkpoints, no evaluation; the first step is not measured).
BENCH=("${MPI1[@]}" "$BIN" bench train --count-syncs "${COMMON[@]}" --set train.precision="$PREC" --set train.steps="$BENCH_STEPS"
  --set train.log_every=10 --set train.health_every=0 --set train.report=false)
step bench-siglip "$T_BENCH" --needs prep-image-text -- "${BENCH[@]}" --config "$ROOT/jobs/configs/siglip-base.yaml" \
  --data "$WORK/it.h5" "${SIGLIP_SETS[@]}" --run-dir "$WORK/bench-siglip"
# yolo-coco.yaml trains by epochs (train.epochs 100 sets train.steps): epochs 0 gives the steps back.
step bench-yolo "$T_BENCH" --needs prep-detection -- "${BENCH[@]}" --config "$ROOT/jobs/configs/yolo-coco.yaml" \
  --data "$WORK/det.h5" --set train.epochs=0 "${YOLO_SETS[@]}" --run-dir "$WORK/bench-yolo"
step bench-llama "$T_BENCH" --needs prep-text -- "${BENCH[@]}" --config "$ROOT/jobs/configs/llama-1b.yaml" \
  --data "$WORK/text.h5" --set optim.zero=3 --set train.activation_checkpointing=true "${LLAMA_SETS[@]}" \
  --run-dir "$WORK/bench-llama"

# ---------------------------------------------------------------------------------------------------
# Kill and resume: an fp16 lm run with a checkpoint every RESUME_EVERY steps, SIGKILLed once a checkpoint
# is written and two more steps are logged, then resumed with --resume auto; its last checkpoint and
# its losses must equal an uninterrupted run's bit for bit. --inject-straggler (a test hook: a sleep
# after each forward, no effect on the numbers) keeps the steps long enough to be killed mid-run.
cat >"$WORK/resume.yaml" <<YAML
# gpu-check.sh: the kill-and-resume run
task: {name: lm}
model: $RESUME_MODEL
train: {$RESUME_TRAIN, steps: $RESUME_STEPS, log_every: 1, health_every: 0, precision: fp16,
  loss_scale_growth_interval: 3, seed: 3, report: false}
data: {seq_len: $RESUME_SEQ}
optim: {lr: 1.0e-3, warmup: 2}
checkpoint: {every_steps: $RESUME_EVERY, keep_last: 10}
YAML
RESUME_CMD=("${MPI1[@]}" "$BIN" train "${COMMON[@]}" --config "$WORK/resume.yaml" --data "$WORK/text.h5"
  --inject-straggler "0:compute:$STALL_MS")
step resume-reference "$T_TRAIN" --needs prep-text -- "${RESUME_CMD[@]}" --run-dir "$WORK/resume-ref"

kill_run() {  # the run in $WORK/resume-kill, SIGKILLed after its first checkpoint and two more steps
  local dir=$WORK/resume-kill ck want log=$WORK/resume-kill.log
  rm -rf "$dir"
  ck=$(printf '%s/checkpoints/step_%08d.h5' "$dir" "$RESUME_EVERY")
  want=$(printf 'step %6d/' $((RESUME_EVERY + 2)))
  "$@" --run-dir "$dir" >"$log" 2>&1 &
  local launcher=$! victim="" p
  for _ in $(seq 1 3000); do
    if [[ -f $ck && $(<"$log") == *"$want"* ]]; then
      for p in $(pgrep -P "$launcher") $launcher; do
        [[ $(cat "/proc/$p/comm" 2>/dev/null) == meridian ]] && victim=$p && break
      done
      break
    fi
    kill -0 "$launcher" 2>/dev/null || break
    sleep 0.05
  done
  if [[ -z $victim ]]; then
    cat "$log"
    echo "gpu-check: no meridian process to kill (the run ended or never reached step $((RESUME_EVERY + 2)))"
    kill -9 "$launcher" 2>/dev/null
    return 1
  fi
  kill -9 "$victim"
  echo "gpu-check: SIGKILL to meridian (pid $victim) after: $(grep -oE 'step +[0-9]+/[0-9]+' "$log" | tail -1)"
  for _ in $(seq 1 300); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$launcher" 2>/dev/null
  wait "$launcher"
  echo "gpu-check: the launcher exited $? (killed run)"
  sleep 0.5
  cat "$log"
  local last
  last=$(grep -oE 'step +[0-9]+/' "$log" | tail -1 | grep -oE '[0-9]+')
  echo "gpu-check: killed at step ${last:-?} of $RESUME_STEPS; latest: $(cat "$dir/checkpoints/latest" 2>/dev/null)"
  if [[ -z $last ]] || ((last >= RESUME_STEPS)); then echo "gpu-check: the run was not killed mid-run"; return 1; fi
}
export WORK PYTHON RESUME_EVERY RESUME_STEPS
export -f kill_run
step resume-kill "$T_TRAIN" --needs prep-text -- bash -c 'kill_run "$@"' kill_run "${RESUME_CMD[@]}"
step resume-continue "$T_TRAIN" --needs resume-kill -- "${RESUME_CMD[@]}" --run-dir "$WORK/resume-kill" --resume auto

compare_runs() {  # compare_runs REF RESUMED STEPS: /model, /optim, /loss_scale and metrics.csv bit for bit
  "$PYTHON" - "$@" <<'PY'
import csv, sys
import h5py
ref, res, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
name = f"checkpoints/step_{steps:08d}.h5"
def datasets(f, group):
    out = {}
    f[group].visititems(lambda k, v: out.__setitem__(f"{group}/{k}", v) if isinstance(v, h5py.Dataset) else None)
    return out
bad, count, nbytes = [], 0, 0
with h5py.File(f"{ref}/{name}", "r") as a, h5py.File(f"{res}/{name}", "r") as b:
    for group in ("model", "optim", "loss_scale"):
        da, db = datasets(a, group), datasets(b, group)
        if sorted(da) != sorted(db):
            bad.append(f"/{group}: different datasets ({len(da)} vs {len(db)})")
        for k in sorted(set(da) & set(db)):
            x, y = da[k][()], db[k][()]
            count += 1
            nbytes += x.nbytes
            if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
                bad.append(k)
def losses(run):  # the last value logged for each step (a resumed run logs steps again)
    v = {}
    for r in csv.DictReader(open(f"{run}/metrics.csv")):
        if r["name"] in ("train/loss", "train/grad_norm", "train/lr", "train/loss_scale"):
            v[(int(r["step"]), r["name"])] = r["value"]
    return v
la, lb = losses(ref), losses(res)
rows = [k for k in la if k in lb]
diff = [k for k in rows if la[k] != lb[k]]
missing = [k for k in la if k not in lb]
print(f"compared {count} datasets ({nbytes / 1e6:.1f} MB) of /model, /optim and /loss_scale in {name}: "
      f"{len(bad)} differ{(': ' + ', '.join(bad[:5])) if bad else ''}")
print(f"compared {len(rows)} metrics.csv values (loss, grad_norm, lr, loss_scale of steps 1-{steps}): {len(diff)} differ, "
      f"{len(missing)} missing{(': ' + str(sorted(diff)[:3])) if diff else ''}")
print(f"identical: {'yes' if not bad and not diff and not missing and count else 'no'}")
sys.exit(0 if not bad and not diff and not missing and count else 1)
PY
}
export -f compare_runs
step resume-compare 60 --needs "resume-reference resume-continue" -- bash -c 'compare_runs "$@"' compare_runs "$WORK/resume-ref" \
  "$WORK/resume-kill" "$RESUME_STEPS"

# ---------------------------------------------------------------------------------------------------
# Checkpoints of the vision tasks (a few steps, a checkpoint at the end), then eval, predict, generate.
TRAIN=("${MPI1[@]}" "$BIN" train "${COMMON[@]}" --set train.precision="$PREC" --set train.steps="$TRAIN_STEPS"
  --set train.log_every=1 --set train.health_every=0 --set train.report=false --set checkpoint.at_end=true)
CK_SIGLIP=$(printf '%s/train-siglip/checkpoints/step_%08d.h5' "$WORK" "$TRAIN_STEPS")
CK_YOLO=$(printf '%s/train-yolo/checkpoints/step_%08d.h5' "$WORK" "$TRAIN_STEPS")
CK_LM=$(printf '%s/resume-ref/checkpoints/step_%08d.h5' "$WORK" "$RESUME_STEPS")
step train-siglip "$T_TRAIN" --needs prep-image-text -- "${TRAIN[@]}" --config "$ROOT/jobs/configs/siglip-base.yaml" \
  --data "$WORK/it.h5" "${SIGLIP_SETS[@]}" --run-dir "$WORK/train-siglip"
step train-yolo "$T_TRAIN" --needs prep-detection -- "${TRAIN[@]}" --config "$ROOT/jobs/configs/yolo-coco.yaml" \
  --data "$WORK/det.h5" --set train.epochs=0 --set checkpoint.every_minutes=0 "${YOLO_SETS[@]}" \
  --run-dir "$WORK/train-yolo"

images() {  # images DATASET DIR COUNT: the first COUNT images of a raw dataset as PNG files (no imaging library)
  "$PYTHON" - "$@" <<'PY'
import os, struct, sys, zlib
import h5py
src, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(out, exist_ok=True)
with h5py.File(src, "r") as f:
    imgs = f["images"][:n]
for i, rgb in enumerate(imgs):
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))
    chunk = lambda kind, data: struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    with open(f"{out}/img_{i}.png", "wb") as fh:
        fh.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
                 chunk(b"IDAT", zlib.compress(raw, 1)) + chunk(b"IEND", b""))
print(f"{len(imgs)} images of {src} -> {out}")
PY
}
export -f images
# shellcheck disable=SC2016  # expanded by the child bash
step images "$T_INFER" --needs "prep-image-text prep-detection" -- bash -c \
  'images "$1/it.h5" "$1/img-it" 8 && images "$1/det.h5" "$1/img-det" 8' images "$WORK"

INFER=("${MPI1[@]}" "$BIN")
step eval-siglip "$T_INFER" --needs train-siglip -- "${INFER[@]}" eval "${COMMON[@]}" --model "$CK_SIGLIP" \
  --data "$WORK/it.h5" --json "$WORK/eval-siglip.json"
step predict-siglip "$T_INFER" --needs "train-siglip images" -- "${INFER[@]}" predict "${COMMON[@]}" --model "$CK_SIGLIP" \
  --images "$WORK/img-it" --classes "airport,farmland,forest,harbor,residential" --top-k 2 --out "$WORK/pred-siglip.csv"
step eval-yolo "$T_INFER" --needs train-yolo -- "${INFER[@]}" eval "${COMMON[@]}" --model "$CK_YOLO" \
  --data "$WORK/det.h5" --json "$WORK/eval-yolo.json"
step predict-yolo "$T_INFER" --needs "train-yolo images" -- "${INFER[@]}" predict "${COMMON[@]}" --model "$CK_YOLO" \
  --images "$WORK/img-det" --conf 0.01 --out "$WORK/pred-yolo"
step eval-lm "$T_INFER" --needs resume-reference -- "${INFER[@]}" eval "${COMMON[@]}" --model "$CK_LM" \
  --data "$WORK/text.h5" --json "$WORK/eval-lm.json"
step generate "$T_INFER" --needs resume-reference -- "${INFER[@]}" generate "${COMMON[@]}" --model "$CK_LM" \
  --prompt "Describe the harbor." --max-new-tokens 32

# ---------------------------------------------------------------------------------------------------
# gpu-check.json: every step with its figures, read from its output.
TOTAL=$(($(date +%s) - START))
LLAMA_SEQ=$LLAMA_SEQ "$PYTHON" - "$STEPS" "$WORK/out" "$JSON" "$OUT" "$WORK" "$DRY" "$TOTAL" "$BUDGET" "$BUILD" <<'PY' >>"$LOG" 2>&1 ||
import json, os, re, sys, time
steps_file, outdir, json_path, out, work, dry, total, budget, build = sys.argv[1:]
def text(name):  # the step's output without terminal colours (gtest colours its lines under mpirun)
    try:
        return re.sub(r"\x1b\[[0-9;]*m", "", open(os.path.join(outdir, name + ".out"), errors="replace").read())
    except OSError:
        return ""
def num(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return None
def figures(name, t):
    f = {}
    if name == "machine":
        m = re.search(r"^(NVIDIA [^,\n]+|[^,\n]*H[12]00[^,\n]*), ([0-9]+ MiB), ([0-9.]+)$", t, re.M)
        if m:
            f.update(gpu=m[1], memory=m[2], driver=m[3])
        m = re.search(r"torch (\S+) cuda (\S+)", t)
        if m:
            f.update(torch=m[1], cuda=m[2])
        m = re.search(r"^([0-9]+)$", t, re.M)
        if m:
            f["cores"] = int(m[1])
    elif name == "version":
        for key in ("LibTorch", "CUDA", "NCCL", "MPI", "HDF5"):
            m = re.search(rf"^\s*{key}\s+(.*)$", t, re.M)
            if m:
                f[key.lower()] = m[1].strip()
        m = re.search(r"^meridian (.*)$", t, re.M)
        if m:
            f["meridian"] = m[1]
        m = re.search(r"^\s*GPUs\s+CUDA ([0-9.]+) \((?:track (\w+)|[^)]*)\), architectures (.*)$", t, re.M)
        if m:
            f.update(build_cuda=m[1], track=m[2] or "none", archs=m[3].strip())
    elif name == "gpu-build":
        m = re.search(r"^rank 0 gpu build (.*)$", t, re.M)
        if m:
            f["verdict"] = m[1]
    elif name.endswith("tests"):
        m = re.search(r"\[  PASSED  \] ([0-9]+) test", t)
        f["passed"] = int(m[1]) if m else 0
        m = re.search(r"\[  SKIPPED \] ([0-9]+) test", t)
        f["skipped"] = int(m[1]) if m else 0
        m = re.search(r"\[  FAILED  \] ([0-9]+) test", t)
        f["failed"] = int(m[1]) if m else 0
    elif name.startswith("prep-"):
        m = re.search(r"prep: wrote (\S+): ([0-9]+) of [0-9]+ inputs in ([0-9.]+) s \(([0-9.]+) inputs/s\)(.*)", t)
        if m:
            f.update(samples=int(m[2]), seconds=num(m[3]), samples_per_s=num(m[4]))
            k = re.search(r"([0-9]+) tokens", m[5])
            if k:
                f["tokens"] = int(k[1])
    elif name.startswith("bench-") and name != "bench-comm":
        m = re.search(r"bench train: ([0-9]+) ranks, ([0-9.]+) samples/s \(([0-9.]+) per rank\), step ([0-9.]+) ms: "
                      r"data ([0-9.]+) \(([0-9]+)%\), forward ([0-9.]+) \(([0-9]+)%\), backward ([0-9.]+) \(([0-9]+)%\), "
                      r"exposed comm ([0-9.]+) \(([0-9]+)%\), optimizer ([0-9.]+) \(([0-9]+)%\)", t)
        if m:
            f.update(ranks=int(m[1]), samples_per_s=num(m[2]), step_ms=num(m[4]), data_ms=num(m[5]), forward_ms=num(m[7]),
                     backward_ms=num(m[9]), comm_ms=num(m[11]), optimizer_ms=num(m[13]))
        m = re.search(r"model ([0-9.]+) GFLOP/s .*MFU ([0-9.]+)% of ([0-9.]+) GFLOP/s per rank", t)
        if m:
            f.update(model_tflops=num(m[1]) / 1e3, mfu_percent=num(m[2]), peak_tflops=num(m[3]) / 1e3)
        m = re.search(r"MFU against ([0-9.]+) GFLOP/s per device \((.*)\)", t)
        if m:
            f["peak_source"] = m[2]
        m = re.search(r"([0-9.]+)M trained parameters.*?, ([0-9.]+) GFLOP per sample forward; .*? = ([0-9]+) samples "
                      r"per step", t)
        if m:
            f.update(parameters_m=num(m[1]), forward_gflop_per_sample=num(m[2]), samples_per_step=int(m[3]))
        m = re.search(r"host synchronisations per step ([0-9.]+) \(at most ([0-9]+) in one step", t)
        if m:
            # Issue 59's goal: at most 1 per step for SigLIP and lm (DDP), 2 for detect (the positives' nonzero).
            goal = {"bench-siglip": 1, "bench-yolo": 2}.get(name)
            f.update(host_syncs_per_step=num(m[1]), host_syncs_max=int(m[2]))
            if goal is not None:
                f["host_syncs_goal"] = goal
                f["host_syncs_within_goal"] = num(m[1]) <= goal
        m = re.search(r"peak resident ([0-9.]+) GiB per rank", t)
        if m:
            f["host_peak_resident_gib"] = num(m[1])
        m = re.search(r"peak GPU allocated ([0-9.]+) GiB per rank", t)
        if m:
            f["gpu_peak_allocated_gib"] = num(m[1])
    elif name.startswith("resume-"):
        m = re.search(r"killed at step ([0-9]+) of ([0-9]+)", t)
        if m:
            f.update(killed_at_step=int(m[1]), steps=int(m[2]))
        m = re.search(r"resumed from (\S+): step ([0-9]+)", t)
        if m:
            f.update(resumed_from=os.path.basename(m[1]), resumed_at_step=int(m[2]))
        m = re.search(r"compared ([0-9]+) datasets \(([0-9.]+) MB\).*: ([0-9]+) differ", t)
        if m:
            f.update(datasets_compared=int(m[1]), megabytes_compared=num(m[2]), datasets_differing=int(m[3]))
        m = re.search(r"compared ([0-9]+) metrics.csv values .*: ([0-9]+) differ, ([0-9]+) missing", t)
        if m:
            f.update(metrics_compared=int(m[1]), metrics_differing=int(m[2]), metrics_missing=int(m[3]))
        m = re.search(r"identical: (yes|no)", t)
        if m:
            f["bit_identical"] = m[1] == "yes"
        m = re.search(r"train: ([0-9]+) steps, loss ([0-9.]+) -> ([0-9.]+), ([0-9.]+) samples/s", t)
        if m:
            f.update(steps_run=int(m[1]), loss_first=num(m[2]), loss_last=num(m[3]), samples_per_s=num(m[4]))
    elif name.startswith("train-"):
        m = re.search(r"train: ([0-9]+) steps, loss ([0-9.]+) -> ([0-9.]+), ([0-9.]+) samples/s .*?, ([0-9.]+)M parameters", t)
        if m:
            f.update(steps=int(m[1]), loss_first=num(m[2]), loss_last=num(m[3]), samples_per_s=num(m[4]),
                     parameters_m=num(m[5]))
        m = re.findall(r"MFU ([0-9.]+)%", t)
        if m:
            f["mfu_percent_last_step"] = num(m[-1])
    elif name.startswith("eval-"):
        path = os.path.join(work, name + ".json")
        try:
            doc = json.load(open(path))
            f.update(metrics=doc["metrics"], counts=doc.get("counts"))
        except (OSError, ValueError, KeyError):
            m = re.search(r"^eval: (.*)$", t, re.M)
            if m:
                f["metrics"] = {k: num(v) for k, v in re.findall(r"(\S+) ([-0-9.eE+naif]+)", m[1])}
        f["bf16"] = "in bf16" in t
    elif name.startswith("predict-"):
        m = re.search(r"predict: ([0-9]+) images, (.*) -> ", t)
        if m:
            f.update(images=int(m[1]), found=m[2])
        f["bf16"] = "in bf16" in t
    elif name == "generate":
        m = re.search(r"generated \(([0-9]+) tokens, ([^)]*)\): (.*)", t)
        if m:
            f.update(tokens=int(m[1]), mode=m[2], text=m[3][:200])
        f["bf16"] = "in bf16" in t
    elif name == "bench-comm":
        try:
            rows = json.load(open(os.path.join(out, "bench-nccl.json")))["rows"]
            best = {}
            for r in rows:
                k = f"{r['collective']}_{r['dtype']}"
                if k not in best or r["bytes"] > best[k]["bytes"]:
                    best[k] = r
            f["largest"] = {k: {"bytes": r["bytes"], "time_us": r["time_us"], "algbw_gbs": r["algbw_gbs"],
                                "busbw_gbs": r["busbw_gbs"]} for k, r in best.items()}
            f["wrong_elements"] = sum(int(r.get("wrong", 0)) for r in rows)
        except (OSError, ValueError, KeyError) as e:
            f["error"] = str(e)
    return f
memory = []  # (time, MiB used on GPU 0), sampled every 0.5 s on the GPU
try:
    for line in open(os.path.join(work, "gpu-memory.txt")):
        p = line.split()
        if len(p) == 2 and num(p[0]) is not None and num(p[1]) is not None:
            memory.append((num(p[0]), num(p[1])))
except OSError:
    pass
steps = []
for line in open(steps_file):
    name, status, secs, rc, note, t0, t1 = (line.rstrip("\n").split("\t") + [""] * 7)[:7]
    s = {"name": name, "status": status, "seconds": num(secs), "exit_code": int(rc) if rc.lstrip("-").isdigit() else None}
    if note:
        s["note"] = note
    if status not in ("skipped", "no-time"):
        s["figures"] = figures(name, text(name))
        used = [m for t, m in memory if num(t0) is not None and num(t1) is not None and num(t0) <= t <= num(t1)]
        if used:
            s["figures"]["gpu_memory_peak_mib"] = max(used)
    steps.append(s)
# tokens/s of the language-model bench: samples/s x data.seq_len
for s in steps:
    fig = s.get("figures", {})
    if s["name"] == "bench-llama" and "samples_per_s" in fig:
        fig["seq_len"] = int(os.environ["LLAMA_SEQ"])
        fig["tokens_per_s"] = round(fig["samples_per_s"] * fig["seq_len"], 1)
failed = [s["name"] for s in steps if s["status"] not in ("ok", "skipped")]
doc = {"check": "jobs/gpu-check.sh", "mode": "dry-run (cpu)" if dry == "1" else "gpu", "build": build,
       "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "seconds": int(total), "budget_seconds": int(budget),
       "status": "ok" if not failed else "failed", "failed": failed, "steps": steps}
json.dump(doc, open(json_path, "w"), indent=2)
print(json.dumps({s["name"]: s.get("figures", {}) for s in steps if s["name"].startswith(("bench-", "resume-compare"))}, indent=1))
PY
  { record report failed 0 1 "writing gpu-check.json failed"; say "FAIL: writing $JSON failed (see $LOG)"; }

say ""
say "gpu-check: $(grep -c . "$STEPS") steps in $TOTAL s (budget $BUDGET s); results: $JSON, $LOG"
while IFS=$'\t' read -r name status secs rc note; do
  printf '  %-18s %-8s %6s s  %s\n' "$name" "$status" "$secs" "$note"
done < <(cut -f1-5 "$STEPS") | tee -a "$LOG"
if ((${#FAILED[@]})); then
  for n in "${FAILED[@]}"; do say "FAIL: step $n: ${STATUS[$n]} (its output: $LOG)"; done
  exit 1
fi
say "PASS"
exit 0
