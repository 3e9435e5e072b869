# shellcheck shell=bash
# The CUDA toolkit meridian builds with, made of the environment's own wheels: sourced by
# jobs/setup-node.sh. NVIDIA ships the compiler, headers and libraries as wheels (nvidia-cuda-nvcc,
# nvidia-cuda-runtime, nvidia-cuda-cccl and the libraries LibTorch loads), each in a folder of its own
# under site-packages/nvidia (CUDA 12: nvidia/cuda_nvcc, nvidia/cublas, ...; CUDA 13: nvidia/cu13).
# CMake's FindCUDA and FindCUDAToolkit, which LibTorch's package calls, expect one root with bin/,
# include/, lib/ (lib64/) and nvvm/, and linkable (unversioned) library names: cuda_toolkit_view makes that
# root of links, so the toolkit is exactly the CUDA version of the LibTorch beside it.

# cuda_toolkit_view SITE_PACKAGES DEST: (re)makes DEST as links into SITE_PACKAGES/nvidia/*. Prints
# the nvcc version; returns 1 when the wheels hold no nvcc.
cuda_toolkit_view() {
  local site=$1 dest=$2 pkg entry lib base name
  rm -rf "$dest"
  mkdir -p "$dest/include" "$dest/lib"
  ln -s lib "$dest/lib64"
  for pkg in "$site"/nvidia/*/; do
    pkg=${pkg%/}
    # The compiler: bin/ and nvvm/ together (nvcc.profile finds nvvm beside its own folder), linked
    # whole so that nvcc's real path keeps them side by side.
    if [[ -x $pkg/bin/nvcc ]]; then
      ln -s "$pkg/bin" "$dest/bin"
      [[ -d $pkg/nvvm ]] && ln -s "$pkg/nvvm" "$dest/nvvm"
    fi
    if [[ -d $pkg/include ]]; then
      for entry in "$pkg"/include/*; do
        [[ -e $dest/include/${entry##*/} ]] || ln -s "$entry" "$dest/include/${entry##*/}"
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
  [[ -x $dest/bin/nvcc ]] || return 1
  "$dest/bin/nvcc" --version | sed -n 's/^Cuda compilation tools, release \([0-9.]*\).*/\1/p'
}
