# CUDA toolkit + NCCL for the GPU collective backend: both required (meridian is built against a CUDA
# LibTorch, and every CUDA path is compiled whether or not the build machine has a GPU).
# NCCL is the one LibTorch loads: the nvidia-nccl wheel beside it (MERIDIAN_TORCH_SITE) comes first,
# then NCCL_ROOT / NCCL_HOME and the toolkit. Sets the imported target meridian::nccl and NCCL_VERSION.
if(NOT TARGET CUDA::cudart)  # a toolkit named by CUDAToolkit_ROOT (else MeridianCudaToolkit defined it)
  find_package(CUDAToolkit QUIET)
  if(NOT CUDAToolkit_FOUND)
    message(FATAL_ERROR "meridian: the CUDA toolkit was not found at '${CUDAToolkit_ROOT}'")
  endif()
endif()
file(GLOB _nccl_wheel ${MERIDIAN_TORCH_SITE}/nvidia/nccl ${MERIDIAN_TORCH_SITE}/nvidia/*/nccl)
set(_nccl_hints ${_nccl_wheel} ${NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME} ${CUDAToolkit_LIBRARY_ROOT})
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} PATH_SUFFIXES include NO_DEFAULT_PATH)
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
# NAMES_PER_DIR: a hinted directory (the nvidia-nccl wheel ships only libnccl.so.2) wins over a system
# libnccl.so, so meridian links the NCCL that LibTorch loads.
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${_nccl_hints} ${CUDAToolkit_LIBRARY_DIR}
             PATH_SUFFIXES lib lib64)
if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
  message(FATAL_ERROR "meridian: nccl.h or libnccl not found (looked beside LibTorch in ${MERIDIAN_TORCH_SITE}/nvidia, "
                      "then NCCL_ROOT and the CUDA toolkit)")
endif()
file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_ver REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*NCCL_MINOR ([0-9]+).*NCCL_PATCH ([0-9]+).*" "\\1.\\2.\\3"
       NCCL_VERSION "${_nccl_ver}")
add_library(meridian::nccl UNKNOWN IMPORTED)
set_target_properties(meridian::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                      INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
