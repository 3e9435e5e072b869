#!/usr/bin/env bash
# Usage: cuda_toolkit_test.sh TORCH_DIR — the CUDA headers and libraries meridian builds with:
#  1. jobs/lib/cuda_toolkit.sh gathers a site-packages' nvidia wheels (both layouts: CUDA 12's folder per
#     wheel, CUDA 13's nvidia/cu13) into one root with linkable library names and reports cuda.h's version;
#  2. a toolkit named by CUDAToolkit_ROOT whose CUDA major version is not LibTorch's is a configure error
#     that names both versions (a stand-in toolkit: only its cuda.h is read before the error).
set -u
torch_dir=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$src/jobs/lib/cuda_toolkit.sh"

# 1. CUDA 12 layout: a folder per wheel.
site=$tmp/site12
mkdir -p "$site/nvidia/cuda_runtime/include" "$site/nvidia/cuda_runtime/lib" "$site/nvidia/cublas/include" \
  "$site/nvidia/cublas/lib" "$site/nvidia/cuda_cccl/include/cub" "$site/nvidia/cuda_nvcc/include/crt"
: >"$site/nvidia/cuda_nvcc/include/crt/host_config.h"
printf '#define CUDA_VERSION 12080\n' >"$site/nvidia/cuda_runtime/include/cuda.h"
: >"$site/nvidia/cuda_runtime/include/cuda_runtime_api.h"
: >"$site/nvidia/cuda_runtime/include/__init__.py"
: >"$site/nvidia/cuda_runtime/lib/libcudart.so.12"
: >"$site/nvidia/cublas/include/cublas_v2.h"
: >"$site/nvidia/cublas/lib/libcublas.so.12"
: >"$site/nvidia/cublas/lib/libcublasLt.so.12"
version=$(cuda_toolkit_view "$site" "$tmp/view12") || fail "the CUDA 12 layout was not gathered"
[[ $version == 12.8 ]] || fail "version '$version', expected 12.8"
for f in include/cuda.h include/cuda_runtime_api.h include/crt/host_config.h include/cublas_v2.h include/cub lib/libcudart.so.12 lib/libcudart.so \
  lib/libcublas.so lib/libcublasLt.so lib64/libcublasLt.so.12; do
  [[ -e $tmp/view12/$f ]] || fail "view12 lacks $f"
done
[[ $(readlink -f "$tmp/view12/lib/libcudart.so") == "$site/nvidia/cuda_runtime/lib/libcudart.so.12" ]] ||
  fail "libcudart.so does not lead to the wheel's libcudart.so.12"
[[ -e $tmp/view12/include/__init__.py ]] && fail "the wheels' Python files were gathered"
echo "ok: CUDA 12 layout gathered, CUDA $version"
# CUDA 13 layout: one folder; and wheels without the runtime headers are refused.
mkdir -p "$tmp/site13/nvidia/cu13/include/crt" "$tmp/site13/nvidia/cu13/lib"
: >"$tmp/site13/nvidia/cu13/include/crt/host_config.h"
printf '#define CUDA_VERSION 13020\n' >"$tmp/site13/nvidia/cu13/include/cuda.h"
: >"$tmp/site13/nvidia/cu13/include/cuda_runtime_api.h"
: >"$tmp/site13/nvidia/cu13/lib/libcudart.so.13"
version=$(cuda_toolkit_view "$tmp/site13" "$tmp/view13") || fail "the CUDA 13 layout was not gathered"
[[ $version == 13.2 && -e $tmp/view13/lib/libcudart.so ]] || fail "CUDA 13 layout: version '$version'"
echo "ok: CUDA 13 layout gathered, CUDA $version"
rm "$tmp/site13/nvidia/cu13/include/crt/host_config.h"
cuda_toolkit_view "$tmp/site13" "$tmp/view13b" >/dev/null && fail "wheels without crt/host_config.h were accepted"
rm "$tmp/site13/nvidia/cu13/include/cuda_runtime_api.h"
cuda_toolkit_view "$tmp/site13" "$tmp/view13c" >/dev/null && fail "wheels without cuda_runtime_api.h were accepted"
echo "ok: wheels without the runtime headers refused"

# 2. A named toolkit of another major version than LibTorch's CUDA.
mkdir -p "$tmp/cuda-11.8/include"
printf '#define CUDA_VERSION 11080\n' >"$tmp/cuda-11.8/include/cuda.h"
torch_cuda=$(sed -n "s/^cuda[^=]*= *'\([0-9.]*\)'.*/\1/p" "$torch_dir/../../../version.py")
[[ -n $torch_cuda ]] || fail "no CUDA version in $torch_dir/../../../version.py"
rc=0
cmake -S "$src" -B "$tmp/build" -DTorch_DIR="$torch_dir" -DCUDAToolkit_ROOT="$tmp/cuda-11.8" -DMERIDIAN_BUILD_TESTS=OFF \
  >"$tmp/configure.log" 2>&1 || rc=$?
((rc != 0)) || fail "configure passed with a CUDA 11.8 toolkit against LibTorch's CUDA $torch_cuda"
msg=$(tr -s ' \n' ' ' <"$tmp/configure.log")
for want in "is CUDA 11.8 (named by CUDAToolkit_ROOT)" "is built with CUDA $torch_cuda" "major versions must match"; do
  grep -qF "$want" <<<"$msg" || { cat "$tmp/configure.log"; fail "the configure error does not say '$want'"; }
done
echo "ok: a CUDA 11.8 toolkit against LibTorch's CUDA $torch_cuda is a configure error naming both"
echo "PASS"
