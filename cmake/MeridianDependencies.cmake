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

# LibTorch is PyTorch's own (2.x, with CUDA), from the Python environment jobs/setup-node.sh installs
# (MERIDIAN_VENV, default /opt/meridian/venv): the same torch that the tests' Python references and
# the benchmarks' PyTorch peers import. -DTorch_DIR=<site-packages>/torch/share/cmake/Torch picks another
# (a GPU node's own PyTorch: jobs/gpu-deps.sh passes it).
set(MERIDIAN_VENV "$ENV{MERIDIAN_VENV}" CACHE PATH "meridian's Python environment (jobs/setup-node.sh)")
if(NOT MERIDIAN_VENV)
  set(MERIDIAN_VENV /opt/meridian/venv CACHE PATH "meridian's Python environment (jobs/setup-node.sh)" FORCE)
endif()
if(NOT Torch_DIR)
  file(GLOB _venv_torch ${MERIDIAN_VENV}/lib/python3*/site-packages/torch/share/cmake/Torch)
  if(_venv_torch)
    list(GET _venv_torch 0 _venv_torch)
    set(Torch_DIR ${_venv_torch} CACHE PATH "LibTorch's CMake package (PyTorch wheel)" FORCE)
  endif()
endif()
if(NOT TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  # meridian has no kernels of its own: this only keeps LibTorch's CMake from probing for a GPU.
  set(TORCH_CUDA_ARCH_LIST "8.0;9.0")
endif()
# The wheel's own directory (site-packages): the NCCL (nvidia-nccl-*), CUDA runtime and NVRTC
# (nvidia-cuda-*) that LibTorch loads live beside it, and meridian links those, not the toolkit's
# (NCCL: MeridianNccl). NVRTC is LibTorch's cache variable, read by its package.
get_filename_component(MERIDIAN_TORCH_SITE "${Torch_DIR}/../../../.." ABSOLUTE)
function(meridian_wheel_lib out name)  # the wheel's lib<name>.so.<major>, or "" when there is none
  file(GLOB libs ${MERIDIAN_TORCH_SITE}/nvidia/*/lib/lib${name}.so.[0-9]*)
  list(FILTER libs INCLUDE REGEX "lib${name}\\.so\\.[0-9]+$")
  list(APPEND libs "")
  list(GET libs 0 lib)
  set(${out} "${lib}" PARENT_SCOPE)
endfunction()
# LibTorch's package finds Caffe2's and its libraries by search paths in which a system LibTorch (Debian's
# libtorch-dev, CPU-only) would come first: pin them to the wheel's files.
if(EXISTS ${Torch_DIR}/../Caffe2 AND NOT Caffe2_DIR)
  get_filename_component(Caffe2_DIR ${Torch_DIR}/../Caffe2 ABSOLUTE)
  set(Caffe2_DIR ${Caffe2_DIR} CACHE PATH "LibTorch's Caffe2 package (beside Torch_DIR)")
endif()
foreach(_pair TORCH_LIBRARY:torch c10_LIBRARY:c10 C10_CUDA_LIBRARY:c10_cuda)  # the names its package uses
  string(REPLACE ":" ";" _pair ${_pair})
  list(GET _pair 0 _var)
  list(GET _pair 1 _lib)
  if(EXISTS ${MERIDIAN_TORCH_SITE}/torch/lib/lib${_lib}.so AND NOT ${_var})
    set(${_var} ${MERIDIAN_TORCH_SITE}/torch/lib/lib${_lib}.so CACHE FILEPATH "LibTorch's lib${_lib}")
  endif()
endforeach()
meridian_wheel_lib(_wheel_nvrtc nvrtc)
if(_wheel_nvrtc AND NOT CUDA_NVRTC_LIB)
  set(CUDA_NVRTC_LIB ${_wheel_nvrtc} CACHE FILEPATH "NVRTC that LibTorch links")
endif()
include(MeridianCudaToolkit)  # the toolkit LibTorch's package needs: the environment's own, at LibTorch's CUDA
find_package(Torch QUIET)
meridian_require(Torch "PyTorch 2.x with CUDA in ${MERIDIAN_VENV} (jobs/setup-node.sh), or -DTorch_DIR=<site-packages>/torch/share/cmake/Torch")
if(NOT TARGET torch_cuda OR NOT TARGET c10_cuda)
  message(FATAL_ERROR "meridian: the LibTorch in ${Torch_DIR} (${Torch_VERSION}) is built without CUDA. meridian "
                      "needs PyTorch's CUDA build: jobs/setup-node.sh installs it, or point -DTorch_DIR at another.")
endif()
if(Torch_VERSION VERSION_LESS 2.4)
  message(FATAL_ERROR "meridian: LibTorch ${Torch_VERSION} in ${Torch_DIR} is older than 2.4 (the autocast API per device type)")
endif()
get_filename_component(MERIDIAN_TORCH_SITE "${Torch_DIR}/../../../.." ABSOLUTE)  # Torch_DIR is now set
# LibTorch 2.10's libtorch.so (the cu128 track) exports its own copies of libstdc++'s std::filesystem and
# std::chrono time-zone functions, and comes before libstdc++ in a program's library order, so its copies
# won: std::filesystem::remove_all jumped to address 0. libstdc++ first among every binary's libraries
# makes the C++ library's own definitions the ones used, on every track.
add_link_options("LINKER:--no-as-needed,-lstdc++,--as-needed")
meridian_wheel_lib(_wheel_cudart cudart)
if(_wheel_cudart)
  set_target_properties(CUDA::cudart PROPERTIES IMPORTED_LOCATION ${_wheel_cudart})
endif()

# The Python of the tests' references and the benchmarks' peers: the environment's, else the python3
# whose torch was found (a GPU node's).
if(EXISTS ${MERIDIAN_VENV}/bin/python3)
  set(MERIDIAN_PYTHON ${MERIDIAN_VENV}/bin/python3 CACHE FILEPATH "Python with torch, h5py, yaml, sentencepiece")
else()
  find_program(MERIDIAN_PYTHON NAMES python3 REQUIRED)
endif()
meridian_torch_track(${MERIDIAN_PYTHON})  # the track and the GPU architectures LibTorch carries (build_config.h)

find_package(cxxopts QUIET)
meridian_require(cxxopts "libcxxopts-dev")
find_package(spdlog QUIET)
meridian_require(spdlog "libspdlog-dev")
find_package(fmt QUIET)
meridian_require(fmt "libfmt-dev")
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

# PyTorch's wheel ships the headers of its own fmt (12) and protobuf in its include root, which every
# LibTorch user has on its search path, while Debian's spdlog is built against Debian's fmt 9 and
# meridian links Debian's libprotobuf. MERIDIAN_AHEAD_OF_TORCH holds only links to those two header
# trees and is searched before LibTorch's (an -I directory comes before every -isystem one), so every
# file sees the headers of the libraries it links. (The LibTorch headers that use fmt themselves, the
# profiler's, c10d's and the CUDA tunable GEMMs', are not included by meridian.)
get_target_property(_fmt_include fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
set(MERIDIAN_AHEAD_OF_TORCH ${PROJECT_BINARY_DIR}/ahead-of-torch)
file(MAKE_DIRECTORY ${MERIDIAN_AHEAD_OF_TORCH}/google)
file(CREATE_LINK ${_fmt_include}/fmt ${MERIDIAN_AHEAD_OF_TORCH}/fmt SYMBOLIC)
list(GET Protobuf_INCLUDE_DIRS 0 _protobuf_include)
file(CREATE_LINK ${_protobuf_include}/google/protobuf ${MERIDIAN_AHEAD_OF_TORCH}/google/protobuf SYMBOLIC)

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
