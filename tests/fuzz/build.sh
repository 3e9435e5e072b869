#!/usr/bin/env bash
# Builds the fuzz targets as libFuzzer binaries, meridian's libraries and the targets instrumented
# with AddressSanitizer and UndefinedBehaviorSanitizer (LibTorch, OpenCV, HDF5 and the other
# libraries are not): BUILD/fuzz/fuzz_<target>. Needs clang and libFuzzer (Debian: clang,
# libfuzzer-14-dev; jobs/setup-node.sh installs both).
#
#   tests/fuzz/build.sh [BUILD]      (default: build-fuzz beside the sources)
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$src/build-fuzz}
flags="-O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
cmake -S "$src" -B "$out" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Fuzz \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" -DMERIDIAN_BUILD_TESTS=OFF -DMERIDIAN_FUZZ=ON -DMERIDIAN_SANITIZE=ON >"$out.configure.log" 2>&1 ||
  { tail -30 "$out.configure.log"; exit 1; }
ninja -C "$out" fuzz_targets
