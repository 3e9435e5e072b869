#!/usr/bin/env bash
# GPU check, run on a machine with an NVIDIA GPU, a CUDA LibTorch (PyTorch wheel) and NCCL, but
# possibly no MPI: builds core + comm against them with the Open MPI carried in .gpudeps
# (jobs/gpu-deps.sh), then runs the communicator tests on the NCCL backend, `meridian info` and
# `meridian bench comm --backend nccl`. Results and logs go to $OUT (default /tmp/gpu-check).
# Usage: bash jobs/gpu-check.sh     (from the repository root)
set -uo pipefail
OUT=${OUT:-/tmp/gpu-check}
BUILD=${BUILD:-/tmp/meridian-gpu-build}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu-check.log") 2>&1
status=0
step() { echo; echo "=== $* ($(date +%T))"; }
run() { "$@"; local rc=$?; [[ $rc -eq 0 ]] || { echo "!!! exit $rc: $*"; status=1; }; return $rc; }

step "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "abi", torch._C._GLIBCXX_USE_CXX11_ABI)'
nproc

step "carried dependencies"
source jobs/gpu-deps.sh || { echo "gpu-deps.sh failed"; exit 1; }
echo "MERIDIAN_GPU_CMAKE_ARGS=$MERIDIAN_GPU_CMAKE_ARGS"

step "configure (core + comm, NCCL required)"
# shellcheck disable=SC2086
run cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMERIDIAN_WITH_DATA=OFF -DMERIDIAN_NCCL=ON \
    $MERIDIAN_GPU_CMAKE_ARGS || exit 1

step "build"
run cmake --build "$BUILD" -j "$(nproc)" || exit 1

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
step "meridian --version"
run "$BUILD/meridian" --version
step "meridian info"
run mpirun -np 1 "$BUILD/meridian" info
step "unit tests"
run "$BUILD/tests/meridian_unit_tests"
step "communicator tests, MPI and NCCL backends, 1 rank on cuda:0"
MERIDIAN_TEST_DEVICE=cuda run mpirun -np 1 -x MERIDIAN_TEST_DEVICE "$BUILD/tests/meridian_comm_mpi_tests"
step "data parallel tests, MPI and NCCL backends, 1 rank on cuda:0"
MERIDIAN_TEST_DEVICE=cuda run mpirun -np 1 -x MERIDIAN_TEST_DEVICE "$BUILD/tests/meridian_parallel_mpi_tests"
step "trainer tests (toy task: NCCL DDP, bf16 autocast on CUDA, NaN guard, run files), 1 rank on cuda:0"
MERIDIAN_TEST_DEVICE=cuda run mpirun -np 1 -x MERIDIAN_TEST_DEVICE "$BUILD/tests/meridian_train_mpi_tests"
step "bench ddp on the GPU (NCCL)"
run mpirun -np 1 "$BUILD/meridian" bench ddp --params 64M --batch 64 --steps 10 --trace "$OUT/ddp-trace.json"
step "bench comm, NCCL backend"
run mpirun -np 1 "$BUILD/meridian" bench comm --backend nccl --ops allreduce,broadcast,allgather,reduce_scatter \
    --dtypes float32,bfloat16 --min-bytes 8 --max-bytes 64M --factor 64 --json "$OUT/bench-nccl.json"

step "done: status $status"
exit $status
