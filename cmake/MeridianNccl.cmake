# CUDA + NCCL detection for the GPU collective backend.
# MERIDIAN_NCCL=AUTO builds it when the CUDA toolkit and NCCL are found, ON requires them, OFF skips.
# Sets MERIDIAN_WITH_NCCL and the imported target meridian::nccl.
set(MERIDIAN_WITH_NCCL OFF)
set(MERIDIAN_NCCL_REASON "disabled (-DMERIDIAN_NCCL=OFF)")
string(TOUPPER "${MERIDIAN_NCCL}" _nccl_mode)
if(NOT _nccl_mode STREQUAL "OFF")
  if(NOT CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  find_package(CUDAToolkit QUIET)
  set(_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME} ${CUDAToolkit_LIBRARY_ROOT} /usr/local/cuda)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} PATH_SUFFIXES include NO_DEFAULT_PATH)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
  # NAMES_PER_DIR: a hinted directory (e.g. the nvidia-nccl wheel, which ships only libnccl.so.2) wins
  # over a system libnccl.so, so meridian links the NCCL that LibTorch loads.
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${_nccl_hints} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
  if(NOT CUDAToolkit_FOUND)
    set(MERIDIAN_NCCL_REASON "CUDA toolkit not found")
  elseif(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
    set(MERIDIAN_NCCL_REASON "nccl.h or libnccl not found (set NCCL_ROOT)")
  else()
    file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_ver REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
    string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*NCCL_MINOR ([0-9]+).*NCCL_PATCH ([0-9]+).*" "\\1.\\2.\\3"
           NCCL_VERSION "${_nccl_ver}")
    set(MERIDIAN_WITH_NCCL ON)
    set(MERIDIAN_NCCL_REASON "NCCL ${NCCL_VERSION} (${NCCL_LIBRARY}), CUDA ${CUDAToolkit_VERSION}")
    add_library(meridian::nccl UNKNOWN IMPORTED)
    set_target_properties(meridian::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                          INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
  endif()
  if(_nccl_mode STREQUAL "ON" AND NOT MERIDIAN_WITH_NCCL)
    message(FATAL_ERROR "meridian: -DMERIDIAN_NCCL=ON but ${MERIDIAN_NCCL_REASON}")
  endif()
endif()
