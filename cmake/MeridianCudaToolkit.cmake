# CUDA for LibTorch's package and meridian's own CUDA calls, and the LibTorch track (jobs/torch-tracks.tsv).
#
# meridian compiles no CUDA code: it needs the CUDA headers (the runtime API, and what LibTorch's CUDA
# headers include) and the CUDA runtime LibTorch loads. By default both are the environment's own, at
# LibTorch's own CUDA version: the nvidia wheels' headers and libraries, which jobs/setup-node.sh gathers
# into one root, <venv>/cuda (jobs/lib/cuda_toolkit.sh; -DMERIDIAN_CUDA_ROOT names another such root). LibTorch's package would look for a whole CUDA
# toolkit (public/cuda.cmake: FindCUDA, nvcc, enable_language(CUDA)) only to define torch::cudart;
# defining that target here first makes the file return at its include guard, so no CUDA compiler is
# needed, which the Python package index does not have for CUDA 12 (its nvidia-cuda-nvcc-cu12 wheel holds
# ptxas alone). A system toolkit is used only when named, -DCUDAToolkit_ROOT=/usr/local/cuda-12.8, and then
# LibTorch's package finds it as usual. Either way the toolkit's CUDA major version must be LibTorch's,
# checked here first. Included before find_package(Torch), with MERIDIAN_TORCH_SITE and Torch_DIR set.

# LibTorch's CUDA version, from the wheel's torch/version.py ("13.2"; empty when not a wheel).
set(MERIDIAN_TORCH_CUDA "")
if(EXISTS ${MERIDIAN_TORCH_SITE}/torch/version.py)
  file(STRINGS ${MERIDIAN_TORCH_SITE}/torch/version.py _cuda_line REGEX "^cuda[:= ]")
  string(REGEX MATCH "'([0-9.]+)'" _m "${_cuda_line}")
  set(MERIDIAN_TORCH_CUDA "${CMAKE_MATCH_1}")
endif()

if(CUDAToolkit_ROOT)
  set(MERIDIAN_CUDA_FROM "named by CUDAToolkit_ROOT")
  set(_cuda_root ${CUDAToolkit_ROOT})
else()
  if(NOT MERIDIAN_CUDA_ROOT)
    get_filename_component(_venv_cuda "${MERIDIAN_TORCH_SITE}/../../../cuda" ABSOLUTE)
    set(MERIDIAN_CUDA_ROOT ${_venv_cuda} CACHE PATH "CUDA headers and libraries gathered from the nvidia wheels (jobs/lib/cuda_toolkit.sh)")
  endif()
  set(_cuda_root ${MERIDIAN_CUDA_ROOT})
  set(MERIDIAN_CUDA_FROM "the environment's wheels")
  if(NOT EXISTS ${_cuda_root}/include/cuda_runtime_api.h)
    message(FATAL_ERROR "meridian: no CUDA headers for LibTorch ${MERIDIAN_TORCH_SITE}/torch (CUDA ${MERIDIAN_TORCH_CUDA}): "
                        "${_cuda_root}/include/cuda_runtime_api.h is missing. jobs/setup-node.sh makes them of the "
                        "environment's nvidia wheels; or name a CUDA toolkit of the same major version with "
                        "-DCUDAToolkit_ROOT=DIR.")
  endif()
endif()
# The headers' CUDA version, from cuda.h (CUDA_VERSION 12080).
set(_cuda_h "")
foreach(_dir ${_cuda_root}/include ${_cuda_root}/targets/x86_64-linux/include)
  if(NOT _cuda_h AND EXISTS ${_dir}/cuda.h)
    set(_cuda_h ${_dir}/cuda.h)
  endif()
endforeach()
if(NOT _cuda_h)
  message(FATAL_ERROR "meridian: ${_cuda_root} (${MERIDIAN_CUDA_FROM}) has no include/cuda.h: not a CUDA toolkit")
endif()
file(STRINGS ${_cuda_h} _cuda_line REGEX "^#define CUDA_VERSION [0-9]+")
string(REGEX MATCH "[0-9]+$" _cuda_code "${_cuda_line}")
math(EXPR _major "${_cuda_code} / 1000")
math(EXPR _minor "${_cuda_code} % 1000 / 10")
set(MERIDIAN_TOOLKIT_CUDA "${_major}.${_minor}")
if(MERIDIAN_TORCH_CUDA)
  string(REGEX MATCH "^[0-9]+" _torch_major "${MERIDIAN_TORCH_CUDA}")
  if(NOT _torch_major EQUAL _major)
    message(FATAL_ERROR "meridian: the CUDA toolkit at ${_cuda_root} is CUDA ${MERIDIAN_TOOLKIT_CUDA} (${MERIDIAN_CUDA_FROM}) "
                        "but LibTorch ${MERIDIAN_TORCH_SITE}/torch is built with CUDA ${MERIDIAN_TORCH_CUDA}: the major "
                        "versions must match. Leave CUDAToolkit_ROOT unset to use the environment's own "
                        "(jobs/setup-node.sh), or choose the track of that CUDA (MERIDIAN_TORCH_TRACK, docs/running.md).")
  endif()
endif()

if(CUDAToolkit_ROOT)
  # FindCUDA (LibTorch's package calls it) and enable_language(CUDA) look for nvcc by their own variables.
  if(NOT CUDA_TOOLKIT_ROOT_DIR)
    set(CUDA_TOOLKIT_ROOT_DIR ${CUDAToolkit_ROOT} CACHE PATH "FindCUDA's root: CUDAToolkit_ROOT")
  endif()
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS ${CUDAToolkit_ROOT}/bin/nvcc)
    set(CMAKE_CUDA_COMPILER ${CUDAToolkit_ROOT}/bin/nvcc CACHE FILEPATH "nvcc of CUDAToolkit_ROOT")
  endif()
else()
  # The CUDA runtime LibTorch loads (its wheel, beside it) with the environment's headers, as the
  # targets LibTorch's package (torch::cudart) and meridian (CUDA::cudart) link.
  meridian_wheel_lib(_wheel_cudart cudart)
  if(NOT _wheel_cudart)
    message(FATAL_ERROR "meridian: no libcudart.so.* in ${MERIDIAN_TORCH_SITE}/nvidia/*/lib (LibTorch's CUDA runtime wheel)")
  endif()
  add_library(CUDA::cudart SHARED IMPORTED)
  set_target_properties(CUDA::cudart PROPERTIES IMPORTED_LOCATION ${_wheel_cudart}
                        INTERFACE_INCLUDE_DIRECTORIES ${_cuda_root}/include)
  add_library(torch::cudart INTERFACE IMPORTED)
  set_target_properties(torch::cudart PROPERTIES INTERFACE_LINK_LIBRARIES CUDA::cudart)
  set(CUDAToolkit_VERSION ${MERIDIAN_TOOLKIT_CUDA})
  set(CUDAToolkit_INCLUDE_DIRS ${_cuda_root}/include)
  set(CUDAToolkit_LIBRARY_DIR ${_cuda_root}/lib)
  set(CUDAToolkit_BIN_DIR ${_cuda_root})
endif()

# meridian_torch_track(PYTHON): after find_package(Torch). Sets MERIDIAN_TORCH_TRACK (the row of
# jobs/torch-tracks.tsv whose torch and CUDA this LibTorch is; empty for another LibTorch),
# MERIDIAN_TORCH_CUDA_ARCHS (the GPU architectures libtorch_cuda carries: "sm_75 sm_80 ...", from
# torch._C._cuda_getArchFlags()) and MERIDIAN_TRACKS_CXX (the table as C++ initialisers, for the
# refusal's advice). All three go into build_config.h.
function(meridian_torch_track python)
  set(track "")
  set(rows "")
  file(STRINGS ${PROJECT_SOURCE_DIR}/jobs/torch-tracks.tsv lines REGEX "^[a-z]")
  string(REGEX MATCH "^[0-9.]+" torch_version "${Torch_VERSION}")
  foreach(line ${lines})
    string(REPLACE "\t" ";" f "${line}")
    list(GET f 0 name)
    list(GET f 1 torch)
    list(GET f 2 cuda)
    list(GET f 3 driver_cuda)
    list(GET f 4 driver)
    list(GET f 5 full_driver)
    list(GET f 6 cc)
    if(torch STREQUAL torch_version AND cuda STREQUAL MERIDIAN_TORCH_CUDA)
      set(track ${name})
    endif()
    string(REPLACE "." "" cc_code "${cc}")
    string(REGEX REPLACE "^([0-9]+)\\.([0-9])$" "\\10\\20" cuda_code "${cuda}")
    string(REGEX REPLACE "^([0-9]+)\\.([0-9])$" "\\10\\20" driver_cuda_code "${driver_cuda}")
    string(APPEND rows "{\"${name}\", \"${torch}\", ${cuda_code}, ${driver_cuda_code}, ${driver}, ${full_driver}, ${cc_code}}, ")
  endforeach()
  execute_process(COMMAND ${python} -c "import torch; print(torch._C._cuda_getArchFlags() or '')"
                  OUTPUT_VARIABLE archs RESULT_VARIABLE rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE TIMEOUT 120)
  if(NOT rc EQUAL 0)
    set(archs "")
    message(WARNING "meridian: ${python} could not list LibTorch's GPU architectures; the start-up check "
                    "will test the driver only")
  endif()
  set(MERIDIAN_TORCH_TRACK "${track}" PARENT_SCOPE)
  set(MERIDIAN_TORCH_CUDA_ARCHS "${archs}" PARENT_SCOPE)
  set(MERIDIAN_TRACKS_CXX "${rows}" PARENT_SCOPE)
endfunction()
