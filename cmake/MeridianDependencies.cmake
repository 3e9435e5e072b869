# Finds every dependency. A missing required one is a FATAL_ERROR naming the Debian package
# (jobs/setup-node.sh installs them all); NCCL is optional and reported in the summary.

macro(meridian_require pkg debian_pkg)
  if(NOT ${pkg}_FOUND)
    message(FATAL_ERROR "meridian: ${pkg} not found. Install the Debian package '${debian_pkg}' "
                        "(jobs/setup-node.sh installs every dependency).")
  endif()
endmacro()

find_package(Threads REQUIRED)

find_package(MPI COMPONENTS C CXX)
meridian_require(MPI "libopenmpi-dev openmpi-bin")

find_package(Torch QUIET)
meridian_require(Torch "libtorch-dev (or -DCMAKE_PREFIX_PATH=<libtorch>)")
# A CUDA-enabled LibTorch ships libc10_cuda; the Debian build does not.
if(C10_CUDA_LIBRARY OR TARGET c10_cuda OR TARGET torch_cuda)
  set(MERIDIAN_TORCH_CUDA ON)
else()
  set(MERIDIAN_TORCH_CUDA OFF)
endif()

find_package(cxxopts QUIET)
meridian_require(cxxopts "libcxxopts-dev")
find_package(spdlog QUIET)
meridian_require(spdlog "libspdlog-dev")
find_package(nlohmann_json QUIET)
meridian_require(nlohmann_json "nlohmann-json3-dev")
find_package(yaml-cpp QUIET)
meridian_require(yaml-cpp "libyaml-cpp-dev")
if(MERIDIAN_BUILD_TESTS)
  find_package(GTest QUIET)
  meridian_require(GTest "libgtest-dev")
endif()

# TensorBoard event files (train area): the wire format is written by hand, so no protoc.
find_package(Protobuf QUIET)
meridian_require(Protobuf "libprotobuf-dev")

# The data area (datasets, image decoding, tokenizers). MERIDIAN_WITH_DATA=OFF builds core + comm
# only, for checking a node's communication stack where these libraries are not installed.

if(MERIDIAN_WITH_DATA)
  # Parallel HDF5: Debian installs the MPI build next to the serial one; point FindHDF5 at it.
  if(NOT HDF5_C_COMPILER_EXECUTABLE AND EXISTS /usr/bin/h5pcc)
    set(HDF5_C_COMPILER_EXECUTABLE /usr/bin/h5pcc)
  endif()
  set(HDF5_PREFER_PARALLEL TRUE)
  find_package(HDF5 COMPONENTS C)
  meridian_require(HDF5 "libhdf5-openmpi-dev")
  if(NOT HDF5_IS_PARALLEL)
    message(FATAL_ERROR "meridian: HDF5 found (${HDF5_VERSION}) but it is the serial build; the MPI-IO "
                        "driver is required. Install 'libhdf5-openmpi-dev' or pass -DHDF5_C_COMPILER_EXECUTABLE=<h5pcc>.")
  endif()
  find_package(OpenCV QUIET COMPONENTS core imgproc imgcodecs)
  meridian_require(OpenCV "libopencv-dev")
  # OpenCV 4.6 reads at most 4 bands: multi-band TIFF goes through libtiff (which OpenCV uses anyway).
  find_package(TIFF QUIET)
  meridian_require(TIFF "libtiff-dev")
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    pkg_check_modules(SentencePiece QUIET IMPORTED_TARGET sentencepiece)
    # JPEG columns: encoded by prep, decoded by the loaders' threads (3,600 images/s per core at
    # 256 px here against OpenCV's 1,400: no colour-order pass, no Mat allocation).
    pkg_check_modules(TurboJPEG QUIET IMPORTED_TARGET libturbojpeg)
    # webdataset tar shards as prep input.
    pkg_check_modules(LibArchive QUIET IMPORTED_TARGET libarchive)
  endif()
  meridian_require(SentencePiece "libsentencepiece-dev")
  meridian_require(TurboJPEG "libturbojpeg0-dev")
  meridian_require(LibArchive "libarchive-dev")
endif()

find_program(MERIDIAN_MPIEXEC NAMES mpirun mpiexec HINTS ${MPIEXEC_EXECUTABLE})

include(MeridianNccl)
