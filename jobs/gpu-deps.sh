#!/usr/bin/env bash
# Makes meridian's Debian-packaged dependencies usable on a machine where they cannot be installed
# with apt (the lent GPU machine: Ubuntu-like, python3 + a CUDA PyTorch wheel, no MPI, no HDF5, OpenCV,
# spdlog, yaml-cpp or gtest dev packages, no network).
#
# .gpudeps/ (git-ignored, so it must be carried explicitly) holds Debian 12 .deb files, fetched with
# `apt-get download` on a Debian 12 machine (jobs/gpu-deps-fetch.sh, from jobs/gpu-deps.manifest);
# .gpudeps/MANIFEST.txt lists them with versions and sha256:
#   .gpudeps/*.deb                 Open MPI 4.1.4 (openmpi-bin, libopenmpi3, libopenmpi-dev, openmpi-common)
#                                  and its libraries (pmix, hwloc, libevent, libfabric, ucx, psm, munge,
#                                  pciaccess), spdlog + fmt, yaml-cpp, cxxopts, nlohmann-json, googletest,
#                                  protobuf (TensorBoard files of the train area); for the data area
#                                  (MERIDIAN_WITH_DATA=ON): parallel HDF5 1.10 (libhdf5-openmpi-dev, its C and
#                                  HL libraries, libaec/libsz), OpenCV 4.6 core/imgproc/imgcodecs (+ libopencv-dev
#                                  for the CMake package; tbb; imgcodecs' jpeg, png, webp, tiff, openjp2, OpenEXR,
#                                  gdcm), libtiff-dev, libturbojpeg0-dev, libarchive-dev, libsentencepiece-dev,
#                                  and pkgconf (pkg-config, for the last three)
#   .gpudeps/prefer-system/*.deb   libraries a host usually has (udev, uuid, atomic, numa, rdma-core, libnl;
#                                  libcurl and its libraries, krb5, OpenSSL 3, libxml2 + ICU 72, libGLX + X11
#                                  client libraries, LAPACK/BLAS + gfortran, libpng): used only for the sonames
#                                  the host's ld.so cache lacks
#   .gpudeps/glibc-pre-2.36/*.deb  Debian 11 libevent and libarchive, used instead of Debian 12's on hosts with
#                                  glibc < 2.36 (Debian 12's libevent_core and libarchive need arc4random@GLIBC_2.36
#                                  and arc4random_buf@GLIBC_2.36; Ubuntu 22.04 has 2.35)
# Not carried: GDAL (libopencv_imgcodecs links libgdal.so.32, whose own dependencies - poppler, proj, spatialite,
# netcdf, hdf4, ... - are some 40 MB of .debs). OpenCV calls GDAL only for cv::imread with IMREAD_LOAD_GDAL,
# which meridian never passes, so the unpack builds a stand-in libgdal.so.32 (with the C compiler, cc or
# $CC) defining the 14 functions imgcodecs imports, each returning 0 (GDALOpen fails cleanly).
# Also not carried, as every Ubuntu host has them (apt and dpkg need them): glibc, libstdc++, zlib, bz2/lzma/
# zstd/lz4, libmd, acl, gnutls/nettle/gmp/idn2/p11-kit/tasn1 (apt's https), and, with python3, libffi and expat.
# Nothing is installed into /: every .deb is unpacked with `dpkg -x` into $MERIDIAN_DEPS_ROOT (/opt/deps),
# once (a stamp file records what was unpacked), then the environment points there.
#
# Usage, from anywhere (paths are resolved from this file's location):
#   source jobs/gpu-deps.sh        unpack if needed and export the environment into the current shell
#   bash jobs/gpu-deps.sh          unpack if needed and print the export lines (eval "$(bash jobs/gpu-deps.sh)")
#   bash jobs/gpu-deps.sh --check  unpack if needed, then self-test: missing libraries (ldd), mpirun --version,
#                                  mpicxx -showme, h5pcc (parallel?), pkg-config finds sentencepiece, turbojpeg,
#                                  libarchive, opencv4, `mpirun -np 2 hostname`, and an MPI hello world built with
#                                  mpicxx and run on 2 ranks (if a C++ compiler is present)
# Then configure with:  cmake -S . -B build $MERIDIAN_GPU_CMAKE_ARGS ...   (deliberately unquoted)
#
# Exported: PATH, LD_LIBRARY_PATH, OPAL_PREFIX (relocated Open MPI), OPAL_SYSCONFDIR (Debian's
# openmpi-mca-params.conf: ucx/ofi/openib off, no unused-component warnings), PMIX_INSTALL_PREFIX,
# PMIX_{LIB,DATAROOT,DATA,SYSCONF}DIR and HWLOC_PLUGINS_PATH (relocated plugin/help/config directories),
# OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)=1 (mpirun refuses root otherwise), OMPI_MCA_plm=isolated only when the
# host has neither ssh nor rsh (Open MPI 4.1 will not even launch locally without one), CMAKE_PREFIX_PATH
# and PKG_CONFIG_PATH (+ the unpacked prefix), MERIDIAN_DEPS_ROOT and MERIDIAN_GPU_CMAKE_ARGS:
#   -DMPI_C_COMPILER / -DMPI_CXX_COMPILER / -DMPIEXEC_EXECUTABLE  pin FindMPI to the relocated wrappers (it
#       would also find them first through PATH and CMAKE_PREFIX_PATH; pinning makes a system MPI unable
#       to win). The wrappers only report relocated -I/-L paths while OPAL_PREFIX is set, so configure in
#       a shell that sourced this file.
#   -DHDF5_C_COMPILER_EXECUTABLE=<root>/usr/bin/h5pcc  the relocated parallel HDF5 wrapper (the configure takes
#       /usr/bin/h5pcc where it exists, else FindHDF5 looks through PATH). Debian's h5pcc is a shell script with
#       prefix=/usr and mpicc.openmpi hard-coded, linking the static libhdf5 plus -lcrypto -lcurl -lsz -lz by
#       default; the unpack points it at <root>, at the relocated mpicc.openmpi, and makes it link the shared
#       libhdf5 with only -ldl -lm (libhdf5.so records its own dependencies; a host has no libssl-dev, libcurl-dev,
#       libaec-dev or zlib1g-dev links). FindHDF5 compiles and links a test program with it, then parses -show.
#   -DOpenCV_DIR=<root>/usr/lib/x86_64-linux-gnu/cmake/opencv4  pinned like MPI. Debian's OpenCV package file
#       lists every module and fails on a missing library file; the unpack drops the checks for the modules
#       not carried (all but core, imgproc, imgcodecs).
#   -DTorch_DIR=<wheel>/share/cmake/Torch and -DNCCL_ROOT=<site-packages>/nvidia/nccl  when python3 can
#       import torch / has the nvidia-nccl wheel (skip with MERIDIAN_DEPS_TORCH=0).
# Knobs: MERIDIAN_DEPS_ROOT (default /opt/deps), MERIDIAN_DEPS_SRC (default <repo>/.gpudeps), MERIDIAN_DEPS_TORCH,
#        MERIDIAN_DEPS_GLIBC (pretend glibc version; for testing the glibc < 2.36 path on a newer host).
# Paths must not contain spaces (MERIDIAN_GPU_CMAKE_ARGS is word-split).

if (return 0 2>/dev/null); then
  # Sourced: do the work in a child bash (so `set -e` and helpers never leak into this shell), then
  # evaluate the export lines it prints.
  __mgd_out=$(bash "${BASH_SOURCE[0]}" --print) && eval "$__mgd_out"
  __mgd_rc=$?
  unset __mgd_out
  if [[ $__mgd_rc -eq 0 ]]; then
    echo "gpu-deps: environment set (MERIDIAN_DEPS_ROOT=$MERIDIAN_DEPS_ROOT)" >&2
  fi
  return $__mgd_rc
fi

set -euo pipefail

MODE=${1:---print}
case $MODE in
  --print | --check) ;;
  -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { print }' "$0"; exit 0 ;;
  *) echo "gpu-deps: unknown argument '$MODE' (use --print, --check or source the file)" >&2; exit 2 ;;
esac

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SRC=${MERIDIAN_DEPS_SRC:-$REPO/.gpudeps}
ROOT=${MERIDIAN_DEPS_ROOT:-/opt/deps}
ARCH=x86_64-linux-gnu
STAMP_VERSION=3

die() { echo "gpu-deps: $*" >&2; exit 2; }
log() { echo "gpu-deps: $*" >&2; }

[[ $(uname -m) == x86_64 ]] || die "the .debs are amd64; this machine is $(uname -m)"
[[ -d $SRC ]] || die "$SRC is missing (it is git-ignored: carry '.gpudeps' with the working tree)"
compgen -G "$SRC/*.deb" >/dev/null || die "no .deb files in $SRC"
command -v dpkg >/dev/null || die "dpkg is needed to unpack the .debs (dpkg -x)"
[[ $ROOT == /* && $ROOT != / ]] || die "MERIDIAN_DEPS_ROOT must be an absolute path other than /"

GLIBC=${MERIDIAN_DEPS_GLIBC:-$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}' || true)}
[[ -n $GLIBC ]] || die "cannot tell the glibc version (getconf GNU_LIBC_VERSION)"
OLD_GLIBC=0
if [[ $(printf '%s\n' 2.36 "$GLIBC" | sort -V | head -n1) != 2.36 ]]; then OLD_GLIBC=1; fi
[[ $(printf '%s\n' 2.34 "$GLIBC" | sort -V | head -n1) == 2.34 ]] ||
  die "glibc $GLIBC is too old: the Debian 12 packages need glibc >= 2.34 (Ubuntu >= 22.04)"

LDCONFIG=$(command -v ldconfig || true)
for c in /sbin/ldconfig /usr/sbin/ldconfig; do [[ -z $LDCONFIG && -x $c ]] && LDCONFIG=$c; done
system_has() {  # system_has SONAME: the host's ld.so cache knows an x86-64 library with this soname
  [[ -n $LDCONFIG ]] || return 1
  "$LDCONFIG" -p 2>/dev/null | awk -v n="$1" '$1 == n && /x86-64/ { f = 1 } END { exit !f }'
}

KEY=$({
  echo "v$STAMP_VERSION root=$ROOT old_glibc=$OLD_GLIBC"
  (cd "$SRC" && find . -name '*.deb' -printf '%p %s\n' | LC_ALL=C sort)
} | sha256sum | cut -c1-64)

unpack() {
  local tmp deb
  if [[ -e $ROOT && ! -f $ROOT/.meridian-deps-stamp ]] && [[ -n $(ls -A "$ROOT" 2>/dev/null) ]]; then
    die "$ROOT exists, is not empty and was not made by this script; set MERIDIAN_DEPS_ROOT elsewhere"
  fi
  mkdir -p "$(dirname "$ROOT")" 2>/dev/null || true
  tmp=$(mktemp -d "$ROOT.tmp.XXXXXX") || die "cannot create $ROOT.tmp.* (run as root or set MERIDIAN_DEPS_ROOT)"
  log "unpacking the .debs of $SRC into $ROOT (glibc $GLIBC)"
  for deb in "$SRC"/*.deb; do dpkg -x "$deb" "$tmp"; done
  if [[ $OLD_GLIBC -eq 1 ]]; then
    log "glibc $GLIBC < 2.36: using Debian 11's libevent and libarchive"
    for deb in "$SRC"/glibc-pre-2.36/*.deb; do dpkg -x "$deb" "$tmp"; done
    # libarchive-dev's link names Debian 12's file itself (libarchive.so -> libarchive.so.13.6.2), which the linker
    # would then check against this glibc: point it at the soname, now 3.4.3 (meridian calls only what 3.4 has).
    if [[ -e $tmp/usr/lib/$ARCH/libarchive.so.13.4.3 ]]; then
      ln -sfn libarchive.so.13 "$tmp/usr/lib/$ARCH/libarchive.so"
      rm -f "$tmp/usr/lib/$ARCH/libarchive.so.13.6.2"
    fi
  fi
  mkdir -p "$tmp/prefer-system"
  for deb in "$SRC"/prefer-system/*.deb; do [[ -e $deb ]] && dpkg -x "$deb" "$tmp/prefer-system"; done

  # What the maintainer scripts would have done (update-alternatives), with relative links.
  local w
  for w in mpirun mpiexec mpicc mpicxx mpic++ mpiCC; do
    [[ -e $tmp/usr/bin/$w.openmpi ]] && ln -sfn "$w.openmpi" "$tmp/usr/bin/$w"
  done
  ln -sfn ../libpsm1/libpsm_infinipath.so.1.16 "$tmp/usr/lib/$ARCH/libpsm_infinipath.so.1"
  mkdir -p "$tmp/usr/include/$ARCH"
  ln -sfn "../../lib/$ARCH/openmpi/include" "$tmp/usr/include/$ARCH/mpi"
  ln -sfn openmpi/lib/libmpi.so "$tmp/usr/lib/$ARCH/libmpi.so"
  ln -sfn openmpi/lib/libmpi_cxx.so "$tmp/usr/lib/$ARCH/libmpi++.so"
  # hwloc plugins for X11/NV-CONTROL, OpenCL and libxml2: useless headless, and their libraries are not shipped.
  rm -f "$tmp/usr/lib/$ARCH/hwloc/"{hwloc_gl.so,hwloc_opencl.so,hwloc_xml_libxml.so}
  # Debian's PMIx configuration hard-codes its plugin directory.
  sed -i -E "s#^(mca_base_component_path *= *)/usr/#\1$ROOT/usr/#" "$tmp/usr/lib/$ARCH/pmix2/share/pmix-mca-params.conf"
  # pkg-config files hard-code /usr, in their variables or (hdf5-openmpi.pc) in -I/-L flags (the CMake package
  # files are relocatable and need no edit, but for OpenCV's module checks below).
  find "$tmp" -name '*.pc' -type f -exec sed -i -E -e "s#^(prefix|exec_prefix|libdir|includedir)=/usr#\1=$ROOT/usr#" \
    -e "s#(-[IL]|^PluginDir=)/usr/#\1$ROOT/usr/#g" {} +

  # Parallel HDF5's wrapper (see -DHDF5_C_COMPILER_EXECUTABLE above): relocated prefix and MPI wrapper, the shared
  # libhdf5 by default, no static-only -l flags; h5pcc as update-alternatives would link it.
  local h5=$tmp/usr/bin/h5pcc.openmpi
  sed -i -E -e "s#^prefix=\"/usr\"#prefix=\"$ROOT/usr\"#" \
    -e "s#^(CCBASE|CLINKERBASE)=\"mpicc.openmpi\"#\1=\"$ROOT/usr/bin/mpicc.openmpi\"#" \
    -e 's#^STATIC_AVAILABLE="yes"#STATIC_AVAILABLE="no"#' -e 's#^H5BLD_LIBS=.*#H5BLD_LIBS="-ldl -lm "#' "$h5"
  [[ $(grep -cE "^(prefix=\"$ROOT/usr\"|CCBASE=\"$ROOT/|CLINKERBASE=\"$ROOT/|STATIC_AVAILABLE=\"no\"|H5BLD_LIBS=\"-ldl -lm \")" "$h5") -eq 5 ]] ||
    die "$h5 is not laid out as expected (Debian's libhdf5-openmpi-dev changed?): cannot relocate it"
  ln -sfn h5pcc.openmpi "$tmp/usr/bin/h5pcc"

  # OpenCV: Debian's package file (from libopencv-dev) imports all ~60 modules and stops with FATAL_ERROR when a
  # module's library file is missing; only core, imgproc and imgcodecs are carried, so drop the others' checks
  # (their imported targets stay defined, unused). The opencv_* tools need the missing modules: removed.
  local cvm=$tmp/usr/lib/$ARCH/cmake/opencv4/OpenCVModules-release.cmake t p
  while read -r t p; do
    [[ -e $tmp/usr/$p ]] || sed -i -E "/^list\(APPEND _cmake_import_check_(targets $t|files_for_$t) /d" "$cvm"
  done < <(sed -nE 's#^list\(APPEND _cmake_import_check_files_for_([A-Za-z0-9_]+) "\$\{_IMPORT_PREFIX\}/([^"]+)".*#\1 \2#p' "$cvm")
  rm -f "$tmp"/usr/bin/opencv_*

  # The libgdal.so.32 stand-in (see "Not carried" above). Its symbols: `nm -D --undefined-only` of Debian 12's
  # libopencv_imgcodecs.so.406 (4.6.0+dfsg-12) that its libgdal.so.32 (3.6.2) defines, all functions, unversioned.
  # imgcodecs is linked with -z now, so every one must exist for it to load.
  local cc=${CC:-cc} i=0 sym
  command -v "$cc" >/dev/null || cc=gcc
  {
    echo '/* Stand-in for libgdal.so.32, written by meridian jobs/gpu-deps.sh: OpenCV reaches GDAL only for IMREAD_LOAD_GDAL. */'
    for sym in GDALAllRegister GDALClose GDALGetDataTypeName GDALOpen _ZN11GDALDataset13GetRasterBandEi \
      _ZN11GDALDataset14GetRasterCountEv _ZN11GDALDataset14GetRasterXSizeEv _ZN11GDALDataset14GetRasterYSizeEv \
      _ZN14GDALRasterBand17GetRasterDataTypeEv _ZN14GDALRasterBand8GetXSizeEv _ZN14GDALRasterBand8GetYSizeEv \
      _ZN14GDALRasterBand8RasterIOE10GDALRWFlagiiiiPvii12GDALDataTypexxP20GDALRasterIOExtraArg \
      _ZNK14GDALColorTable13GetColorEntryEi _ZNK14GDALColorTable24GetPaletteInterpretationEv; do
      echo "long meridian_gdal_$i(void) __asm__(\"$sym\"); long meridian_gdal_$i(void) { return 0; }"
      i=$((i + 1))
    done
  } >"$tmp/gdal-stand-in.c"
  if ! command -v "$cc" >/dev/null; then
    log "WARNING: no C compiler (cc, gcc or \$CC) for the libgdal.so.32 stand-in: OpenCV's imgcodecs will not load"
  elif ! "$cc" -shared -fPIC -O2 -Wl,-soname,libgdal.so.32 -o "$tmp/usr/lib/$ARCH/libgdal.so.32" "$tmp/gdal-stand-in.c"; then
    log "WARNING: building the libgdal.so.32 stand-in failed: OpenCV's imgcodecs will not load"
  fi
  rm -f "$tmp/gdal-stand-in.c"

  echo "$KEY" >"$tmp/.meridian-deps-stamp"
  if [[ -e $ROOT ]]; then rm -rf "$ROOT"; fi
  mv "$tmp" "$ROOT"
  chmod 755 "$ROOT"
}

if [[ -f $ROOT/.meridian-deps-stamp && $(cat "$ROOT/.meridian-deps-stamp") == "$KEY" ]]; then
  log "$ROOT is up to date"
else
  unpack
fi

# prefer-system: link only the sonames the host lacks. rdma-core is all-or-nothing (its providers use
# private symbols of the matching libibverbs), keyed on libibverbs.so.1.
FB=$ROOT/fallback-lib
if [[ -w $ROOT ]]; then
  rm -rf "$FB"
  mkdir -p "$FB"
  rdma_sys=0
  system_has libibverbs.so.1 && rdma_sys=1
  # (Debian installs LAPACK and BLAS in subdirectories, behind update-alternatives links.)
  for d in "$ROOT/prefer-system/lib/$ARCH" "$ROOT/prefer-system/usr/lib/$ARCH" "$ROOT/prefer-system/usr/lib/$ARCH/"{lapack,blas}; do
    [[ -d $d ]] || continue
    for f in "$d"/lib*.so.*; do
      n=${f##*/}
      [[ $n =~ ^lib.*\.so\.[0-9]+$ ]] || continue
      if [[ $rdma_sys -eq 1 && $n =~ ^lib(ibverbs|rdmacm|efa|mlx4|mlx5|mana)\.so ]]; then continue; fi
      system_has "$n" || ln -sfn "$(readlink -f "$f")" "$FB/$n"
    done
  done
fi
FB_LIST=$(find "$FB" -mindepth 1 -maxdepth 1 -printf '%f ' 2>/dev/null || true)
[[ -n $FB_LIST ]] && log "host lacks, so using Debian's: $FB_LIST"

# Torch / NCCL locations from the python wheels (queried before our LD_LIBRARY_PATH is set).
TORCH_DIR="" NCCL_DIR=""
if [[ ${MERIDIAN_DEPS_TORCH:-1} != 0 ]] && command -v python3 >/dev/null; then
  py_out=$(timeout 120 python3 - 2>/dev/null <<'EOF' || true
import glob, importlib.util, os
nv = importlib.util.find_spec("nvidia")
for base in (nv.submodule_search_locations or []) if nv else []:
    hits = sorted(glob.glob(os.path.join(base, "nccl", "include", "nccl.h")) +
                  glob.glob(os.path.join(base, "*", "nccl", "include", "nccl.h")) +
                  glob.glob(os.path.join(base, "*", "include", "nccl.h")))
    if hits:
        print("NCCL", os.path.dirname(os.path.dirname(hits[0])))
        break
try:
    import torch
    print("TORCH", os.path.join(torch.utils.cmake_prefix_path, "Torch"))
    print("ABI", int(torch.compiled_with_cxx11_abi()))
except Exception:
    pass
EOF
  )
  TORCH_DIR=$(awk '$1 == "TORCH" { print $2 }' <<<"$py_out")
  NCCL_DIR=$(awk '$1 == "NCCL" { print $2 }' <<<"$py_out")
  if [[ $(awk '$1 == "ABI" { print $2 }' <<<"$py_out") == 0 ]]; then
    log "WARNING: this torch uses the pre-C++11 ABI (_GLIBCXX_USE_CXX11_ABI=0); Debian's spdlog/yaml-cpp/gtest use the new one"
  fi
fi

L=$ROOT/usr/lib/$ARCH
join_path() {  # join_path NEW OLD: NEW:OLD without repeating entries of NEW already in OLD
  local new=$1 old=${2:-} out="" e
  local IFS=:
  for e in $new; do [[ :$old: == *":$e:"* ]] || out+=${out:+:}$e; done
  [[ -n $old ]] && out+=${out:+:}$old
  echo "$out"
}
P=$L/pmix2  # Debian configured PMIx with absolute libdir/datadir/sysconfdir, so relocating the prefix is not enough
LIBS="$L/openmpi/lib:$L:$ROOT/lib/$ARCH:$P/lib"
[[ -n $FB_LIST ]] && LIBS+=":$FB"
CMAKE_ARGS="-DMPI_C_COMPILER=$ROOT/usr/bin/mpicc -DMPI_CXX_COMPILER=$ROOT/usr/bin/mpicxx -DMPIEXEC_EXECUTABLE=$ROOT/usr/bin/mpirun"
CMAKE_ARGS+=" -DHDF5_C_COMPILER_EXECUTABLE=$ROOT/usr/bin/h5pcc -DOpenCV_DIR=$L/cmake/opencv4"
[[ -n $TORCH_DIR ]] && CMAKE_ARGS+=" -DTorch_DIR=$TORCH_DIR"
# A node's own PyTorch has no CUDA root made beside it by jobs/setup-node.sh: gather one from the nvidia
# wheels beside that torch, as the setup does (meridian needs the CUDA headers, not a compiler).
if [[ -n $TORCH_DIR ]]; then
  source "$REPO/jobs/lib/cuda_toolkit.sh"
  if cuda_toolkit_view "$(cd "$TORCH_DIR/../../../.." && pwd)" "$ROOT/cuda" >/dev/null; then
    CMAKE_ARGS+=" -DMERIDIAN_CUDA_ROOT=$ROOT/cuda"
  fi
fi
[[ -n $NCCL_DIR ]] && CMAKE_ARGS+=" -DNCCL_ROOT=$NCCL_DIR"

declare -A ENVV=(
  [PATH]=$(join_path "$ROOT/usr/bin" "${PATH:-}")
  [LD_LIBRARY_PATH]=$(join_path "$LIBS" "${LD_LIBRARY_PATH:-}")
  [OPAL_PREFIX]=$ROOT/usr
  [OPAL_SYSCONFDIR]=$ROOT/etc/openmpi
  [PMIX_INSTALL_PREFIX]=$P
  [PMIX_LIBDIR]=$P/lib
  [PMIX_DATAROOTDIR]=$P/share
  [PMIX_DATADIR]=$P/share
  [PMIX_SYSCONFDIR]=$P/share
  [HWLOC_PLUGINS_PATH]=$L/hwloc
  [OMPI_ALLOW_RUN_AS_ROOT]=1
  [OMPI_ALLOW_RUN_AS_ROOT_CONFIRM]=1
  [CMAKE_PREFIX_PATH]=$(join_path "$ROOT/usr" "${CMAKE_PREFIX_PATH:-}")
  [PKG_CONFIG_PATH]=$(join_path "$L/pkgconfig:$ROOT/usr/share/pkgconfig" "${PKG_CONFIG_PATH:-}")
  [MERIDIAN_DEPS_ROOT]=$ROOT
  [MERIDIAN_GPU_CMAKE_ARGS]=$CMAKE_ARGS
)
ORDER=(PATH LD_LIBRARY_PATH OPAL_PREFIX OPAL_SYSCONFDIR PMIX_INSTALL_PREFIX PMIX_LIBDIR PMIX_DATAROOTDIR
  PMIX_DATADIR PMIX_SYSCONFDIR HWLOC_PLUGINS_PATH
  OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM CMAKE_PREFIX_PATH PKG_CONFIG_PATH
  MERIDIAN_DEPS_ROOT MERIDIAN_GPU_CMAKE_ARGS)

# Open MPI 4.1 refuses to start even a single-node job when neither ssh nor rsh exists (plm/rsh checks its
# launch agent up front); the "isolated" launcher starts local processes only, which is all such a host can do.
if ! command -v ssh >/dev/null && ! command -v rsh >/dev/null; then
  ENVV[OMPI_MCA_plm]=isolated
  ORDER+=(OMPI_MCA_plm)
fi

if [[ $MODE == --print ]]; then
  for v in "${ORDER[@]}"; do printf 'export %s=%q\n' "$v" "${ENVV[$v]}"; done
  exit 0
fi

# --check
for v in "${ORDER[@]}"; do export "$v=${ENVV[$v]}"; done
fail=0
echo "== missing libraries (ldd) =="
missing=$(
  for f in "$ROOT"/usr/bin/{orterun,orted,opal_wrapper,ompi_info} "$L"/lib{mpi,mpi_cxx,open-pal,open-rte}.so.40 \
    "$L"/openmpi/lib/openmpi3/mca_*.so "$L"/pmix2/lib/libpmix.so.2 "$L"/pmix2/lib/pmix/*.so "$L"/hwloc/*.so \
    "$L"/lib{spdlog.so.1.10,fmt.so.9,yaml-cpp.so.0.7,fabric.so.1,ucp.so.0} \
    "$L"/lib{hdf5_openmpi.so.103,hdf5_openmpi_hl.so.100,opencv_core.so.406,opencv_imgproc.so.406} \
    "$L"/lib{opencv_imgcodecs.so.406,tiff.so.6,turbojpeg.so.0,archive.so.13,sentencepiece.so.0,sentencepiece_train.so.0}; do
    ldd "$f" 2>&1 | grep -E 'not found' | sed "s|^|${f##*/}: |" || true
  done
)
# Components for ucx/ofi/openib are disabled by Debian's openmpi-mca-params.conf and never loaded, so
# gaps there (e.g. a host rdma-core older than Debian's) are only reported.
optional_re='(ofi|ucx|openib|verbs|fabric|ucp|uct)'
hard=$(grep -vE "^[^:]*${optional_re}[^:]*:" <<<"$missing" || true)
soft=$(grep -E "^[^:]*${optional_re}[^:]*:" <<<"$missing" || true)
if [[ -n $hard ]]; then echo "$hard"; fail=1; fi
if [[ -n $soft ]]; then while IFS= read -r line; do echo "(disabled component, ignored) $line"; done <<<"$soft"; fi
[[ -n $missing ]] || echo "none"
echo "== which Open MPI =="
command -v mpirun mpicxx
ldd "$(command -v orterun)" | grep -E 'libopen-rte|libopen-pal|libhwloc|libevent_core|libpmix' || true
mpirun --version 2>&1 | sed -n 1p || fail=1
ompi_info --path prefix 2>&1 | sed 's/^ *//' || fail=1
ompi_info --path sysconfdir 2>&1 | sed 's/^ *//' || true
echo "mpicxx -showme: $(mpicxx -showme 2>&1)"
echo "== data area: h5pcc, pkg-config =="
h5pcc -showconfig 2>&1 | grep -E 'HDF5 Version|Parallel HDF5' | sed 's/^ *//' || fail=1
echo "h5pcc -show: $(h5pcc -show 2>&1)"
for m in sentencepiece libturbojpeg libarchive opencv4; do
  echo "pkg-config $m: $(pkg-config --modversion "$m" 2>&1)" || true
  pkg-config --exists "$m" || fail=1
done
echo "== mpirun -np 2 --oversubscribe hostname =="
out=$(timeout 120 mpirun -np 2 --oversubscribe hostname 2>&1) || fail=1
echo "$out"
if grep -q -- '-----' <<<"$out"; then echo "gpu-deps: WARNING: Open MPI printed a help/warning message (above)"; fi
if command -v "${CXX:-g++}" >/dev/null; then
  echo "== MPI hello world (mpicxx, 2 ranks, allreduce) =="
  t=$(mktemp -d)
  cat >"$t/hello.cpp" <<'EOF'
#include <mpi.h>
#include <cstdio>
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0, sum = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int one = rank + 1;
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  char lib[MPI_MAX_LIBRARY_VERSION_STRING]; int len = 0;
  MPI_Get_library_version(lib, &len);
  if (rank == 0) std::printf("rank 0 of %d: sum=%d (expect %d) | %.40s\n", size, sum, size * (size + 1) / 2, lib);
  MPI_Finalize();
  return sum == size * (size + 1) / 2 ? 0 : 1;
}
EOF
  if OMPI_CXX=${CXX:-g++} mpicxx -o "$t/hello" "$t/hello.cpp"; then
    timeout 120 mpirun -np 2 --oversubscribe "$t/hello" || fail=1
  else
    fail=1
  fi
  rm -rf "$t"
fi
echo "== cmake args =="
echo "MERIDIAN_GPU_CMAKE_ARGS=$MERIDIAN_GPU_CMAKE_ARGS"
if [[ $fail -eq 0 ]]; then echo "gpu-deps: check PASSED"; else echo "gpu-deps: check FAILED"; fi
exit $fail
