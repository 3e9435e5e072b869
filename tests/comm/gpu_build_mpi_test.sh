#!/usr/bin/env bash
# Usage: gpu_build_mpi_test.sh MPIRUN MERIDIAN — a GPU this build cannot run is refused before any
# kernel, on every rank, with exit 2 and one message naming the host, the GPU and its compute
# capability, the driver's CUDA, the build's CUDA and architectures, and the fix; --device auto does not
# fall back to the CPU on such a node; `meridian info` and `doctor` report the same verdict per rank.
# The node's GPU and driver come through the test seam MERIDIAN_TEST_NODE_GPU (comm/gpu_build.h).
set -u
mpirun=$1 meridian=$2
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
host=$(hostname)

version=$("$meridian" --version) || fail "--version exited $?"
track=$(sed -n 's/.*GPUs .*(track \([a-z0-9]*\)).*/\1/p' <<<"$version")
echo "build: $(grep 'GPUs' <<<"$version")"
# A driver older than the build's CUDA, and a GPU older than its kernels, for this build's track.
case $track in
  cu13)
    driver_gpu="driver_cuda=12.4;name=NVIDIA A100-SXM4-40GB;cc=8.0"
    driver_wants=("The driver supports CUDA 12.4, older than the build's CUDA 13" "MERIDIAN_TORCH_TRACK=cu128"
      "install NVIDIA driver 580 or newer (CUDA 13.0) for this build")
    arch_gpu="driver_cuda=13.0;name=Tesla V100-SXM2-16GB;cc=7.0"
    arch_wants=("Tesla V100-SXM2-16GB (compute capability 7.0)" "no kernels for compute capability 7.0"
      "MERIDIAN_TORCH_TRACK=cu128 jobs/setup-node.sh and a rebuild") ;;
  cu128)
    driver_gpu="driver_cuda=11.4;name=Tesla V100-SXM2-16GB;cc=7.0"
    driver_wants=("The driver supports CUDA 11.4, older than the build's CUDA 12" "install NVIDIA driver 525 or newer")
    arch_gpu="driver_cuda=12.8;name=Tesla P100-PCIE-16GB;cc=6.0"
    arch_wants=("Tesla P100-PCIE-16GB (compute capability 6.0)" "no kernels for compute capability 6.0"
      "no track of meridian carries kernels for compute capability 6.0") ;;
  *) fail "--version names no track of jobs/torch-tracks.tsv: $version" ;;
esac

# refused NAME SEAM DEVICE WANTS...: train on 2 ranks is refused, by each rank, with exit 2.
refused() {
  local name=$1 seam=$2 device=$3 rc=0 n want
  shift 3
  MERIDIAN_TEST_NODE_GPU=$seam "$mpirun" --oversubscribe -np 2 -x MERIDIAN_TEST_NODE_GPU "$meridian" train \
    --device "$device" --config /nonexistent.yaml >"$tmp/o" 2>&1 || rc=$?
  sed 's/^/  /' "$tmp/o"
  ((rc == 2)) || fail "$name: exit $rc, expected 2"
  n=$(grep -o "meridian train: this build cannot run on $host's GPU" "$tmp/o" | wc -l)
  ((n == 2)) || fail "$name: $n rank(s) printed the refusal, expected both"
  grep -q "cuda_build\|/nonexistent.yaml" "$tmp/o" && fail "$name: the run went past the device check"
  for want in "driver CUDA" "build: CUDA " "(track $track), architectures sm_" "Fix: " "$@"; do
    grep -qF -- "$want" "$tmp/o" || fail "$name: the refusal does not say '$want'"
  done
  echo "ok: $name"
}
refused "old driver, --device auto" "$driver_gpu" auto "${driver_wants[@]}"
refused "old driver, --device cuda" "$driver_gpu" cuda "${driver_wants[@]}"
refused "GPU without kernels, --device auto" "$arch_gpu" auto "${arch_wants[@]}"

# --device cpu never asks: the same seam, and the config error is what stops it.
MERIDIAN_TEST_NODE_GPU=$arch_gpu "$mpirun" --oversubscribe -np 2 -x MERIDIAN_TEST_NODE_GPU "$meridian" train \
  --device cpu --config /nonexistent.yaml >"$tmp/o" 2>&1
grep -q "this build cannot run" "$tmp/o" && { cat "$tmp/o"; fail "--device cpu was refused"; }
grep -q "/nonexistent.yaml" "$tmp/o" || { cat "$tmp/o"; fail "--device cpu: expected the config error"; }
echo "ok: --device cpu is not checked"

# A malformed seam is refused too, not ignored.
MERIDIAN_TEST_NODE_GPU="cc=seven" "$mpirun" --oversubscribe -np 2 -x MERIDIAN_TEST_NODE_GPU "$meridian" info \
  >"$tmp/o" 2>&1 && { cat "$tmp/o"; fail "a malformed MERIDIAN_TEST_NODE_GPU passed"; }
grep -q "MERIDIAN_TEST_NODE_GPU: 'cc=seven'" "$tmp/o" || { cat "$tmp/o"; fail "the malformed seam is not named"; }

# info: every rank's verdict, the ranks on the CPU, exit 2.
rc=0
MERIDIAN_TEST_NODE_GPU=$arch_gpu "$mpirun" --oversubscribe -np 2 -x MERIDIAN_TEST_NODE_GPU "$meridian" info \
  >"$tmp/o" 2>&1 || rc=$?
cat "$tmp/o"
((rc == 2)) || fail "info: exit $rc, expected 2"
for r in 0 1; do
  grep -q "^rank $r gpu build REFUSED: this build cannot run on $host's GPU" "$tmp/o" || fail "info: no verdict for rank $r"
  grep -q "^rank $r device cpu: this build cannot run" "$tmp/o" || fail "info: rank $r's device is not explained"
done
# doctor: the FAIL line with the fix, exit 1 (a FAIL).
rc=0
MERIDIAN_TEST_NODE_GPU=$driver_gpu "$mpirun" --oversubscribe -np 2 -x MERIDIAN_TEST_NODE_GPU "$meridian" doctor \
  --run-dir "$tmp" >"$tmp/o" 2>&1 || rc=$?
grep -E "gpu build" "$tmp/o"
((rc != 0)) || fail "doctor: exit 0 with a refused GPU"
grep -E "FAIL +gpu build +rank 0: this build cannot run" "$tmp/o" || { cat "$tmp/o"; fail "doctor: no FAIL for the GPU build"; }
# This machine's own verdict (no seam): no GPU here, so nothing is refused and info exits 0.
"$mpirun" --oversubscribe -np 2 "$meridian" info >"$tmp/o" 2>&1 || { cat "$tmp/o"; fail "info without the seam failed"; }
grep "gpu build" "$tmp/o"
echo "PASS"
