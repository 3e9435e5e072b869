# shellcheck shell=bash
# The CUDA headers and libraries meridian builds with, gathered from the environment's own wheels: sourced
# by jobs/setup-node.sh. NVIDIA ships them as wheels at LibTorch's own CUDA version (nvidia-cuda-runtime
# with its include/, nvidia-cuda-cccl, and the libraries LibTorch loads, each with its headers), each in a
# folder of its own under site-packages/nvidia (CUDA 12: nvidia/cuda_runtime, nvidia/cublas, ...; CUDA 13:
# nvidia/cu13). cuda_toolkit_view makes of them one root of links, include/ and lib/ (lib64/), with
# linkable (unversioned) library names, which CMake uses by default (cmake/MeridianCudaToolkit.cmake).
# meridian compiles no CUDA code, so no CUDA compiler is needed (and the package index has none for
# CUDA 12: nvidia-cuda-nvcc-cu12 holds ptxas alone).

# cuda_toolkit_view SITE_PACKAGES DEST: (re)makes DEST as links into SITE_PACKAGES/nvidia/*. Prints the
# headers' CUDA version (cuda.h); returns 1 when the wheels lack the CUDA runtime headers (cuda.h,
# cuda_runtime_api.h, and crt/host_config.h: nvidia-cuda-crt for CUDA 13, nvidia-cuda-nvcc-cu12 for 12).
cuda_toolkit_view() {
  local site=$1 dest=$2 pkg entry lib base name code
  rm -rf "$dest"
  mkdir -p "$dest/include" "$dest/lib"
  ln -s lib "$dest/lib64"
  for pkg in "$site"/nvidia/*/; do
    pkg=${pkg%/}
    if [[ -d $pkg/include ]]; then
      for entry in "$pkg"/include/*; do
        [[ ${entry##*/} == __* || -e $dest/include/${entry##*/} ]] || ln -s "$entry" "$dest/include/${entry##*/}"
      done
    fi
    for lib in "$pkg"/lib/*.so* "$pkg"/lib/*.a; do
      [[ -e $lib ]] || continue
      base=${lib##*/}
      [[ -e $dest/lib/$base ]] || ln -s "$lib" "$dest/lib/$base"
      name=${base%%.so*}  # libcudart.so.13 -> libcudart: the name the linker asks for
      if [[ $base == *.so.* && ! -e $dest/lib/$name.so ]]; then ln -s "$lib" "$dest/lib/$name.so"; fi
    done
  done
  [[ -e $dest/include/cuda_runtime_api.h && -e $dest/include/cuda.h && -e $dest/include/crt/host_config.h ]] || return 1
  code=$(sed -n 's/^#define CUDA_VERSION \([0-9]*\).*/\1/p' "$dest/include/cuda.h")
  echo "$((code / 1000)).$((code % 1000 / 10))"
}
