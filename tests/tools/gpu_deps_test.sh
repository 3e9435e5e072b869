#!/usr/bin/env bash
# Usage: gpu_deps_test.sh TORCH_DIR — the packages jobs/gpu-check.sh carries to a GPU machine (.gpudeps,
# fetched by jobs/gpu-deps-fetch.sh when absent) unpack into a scratch root, pass jobs/gpu-deps.sh's
# self-test (every library's dependencies resolved, mpirun, an MPI program built and run on 2 ranks,
# h5pcc, pkg-config), and the whole project configures against them with this machine's own copies
# hidden from CMake: every dependency resolves under the scratch root. (The build with them is measured
# by hand: docs/performance.md, "PyTorch 2.15 with CUDA".)
set -u
torch_dir=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if ! compgen -G "$src/.gpudeps/*.deb" >/dev/null; then
  echo "no .gpudeps here: fetching (jobs/gpu-deps-fetch.sh)"
  rc=0
  bash "$src/jobs/gpu-deps-fetch.sh" >"$tmp/fetch.log" 2>&1 || rc=$?
  ((rc == 0)) || { tail -20 "$tmp/fetch.log"; fail "gpu-deps-fetch.sh exited $rc"; }
fi
echo ".gpudeps: $(du -sb "$src/.gpudeps" | cut -f1) bytes in $(find "$src/.gpudeps" -name '*.deb' | wc -l) packages"
(($(du -sb "$src/.gpudeps" | cut -f1) < 64 * 1024 * 1024)) || fail ".gpudeps is over the 64 MiB a device run carries"

export MERIDIAN_DEPS_ROOT=$tmp/deps MERIDIAN_DEPS_TORCH=0
bash "$src/jobs/gpu-deps.sh" --check >"$tmp/check.log" 2>&1 || { cat "$tmp/check.log"; fail "gpu-deps.sh --check"; }
grep -E "check PASSED" "$tmp/check.log" || fail "gpu-deps.sh --check did not pass"
eval "$(bash "$src/jobs/gpu-deps.sh" --print 2>/dev/null)" || fail "gpu-deps.sh --print"
export PKG_CONFIG_LIBDIR=$PKG_CONFIG_PATH  # pkg-config sees only the unpacked packages' files

# shellcheck disable=SC2086  # MERIDIAN_GPU_CMAKE_ARGS is word-split by design
cmake -S "$src" -B "$tmp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release $MERIDIAN_GPU_CMAKE_ARGS -DTorch_DIR="$torch_dir" \
  "-DCMAKE_IGNORE_PREFIX_PATH=/usr;/" >"$tmp/configure.log" 2>&1 || { tail -30 "$tmp/configure.log"; fail "configure"; }
grep -E "^-- +(HDF5|OpenCV|SentencePiece|MPI|NCCL|LibTorch) " "$tmp/configure.log"
cache=$tmp/build/CMakeCache.txt
for var in HDF5_C_COMPILER_EXECUTABLE OpenCV_DIR MPI_CXX_COMPILER TIFF_LIBRARY_RELEASE spdlog_DIR yaml-cpp_DIR GTest_DIR \
  Protobuf_LIBRARY_RELEASE pkgcfg_lib_SentencePiece_sentencepiece pkgcfg_lib_TurboJPEG_turbojpeg pkgcfg_lib_LibArchive_archive; do
  value=$(sed -n "s/^$var:[A-Z]*=//p" "$cache")
  [[ $value == "$MERIDIAN_DEPS_ROOT"/* ]] || fail "$var is '$value', not under the unpacked root $MERIDIAN_DEPS_ROOT"
done
echo "every dependency of the configure resolves under $MERIDIAN_DEPS_ROOT"
