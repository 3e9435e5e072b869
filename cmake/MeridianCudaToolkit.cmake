# The CUDA toolkit and the LibTorch track (jobs/torch-tracks.tsv).
#
# Toolkit: LibTorch's CMake package needs nvcc, the CUDA headers and libraries (FindCUDA, enable_language(CUDA),
# FindCUDAToolkit). By default they are the environment's own: jobs/setup-node.sh installs the compiler and
# headers as wheels at LibTorch's own CUDA version and makes of them one toolkit root, <venv>/cuda
# (jobs/lib/cuda_toolkit.sh). A system toolkit is used only when named: -DCUDAToolkit_ROOT=/usr/local/cuda-12.8.
# Either way its CUDA major version must be LibTorch's, checked here before LibTorch's package looks.
# Included before find_package(Torch), with MERIDIAN_TORCH_SITE and Torch_DIR set.

# LibTorch's CUDA version, from the wheel's torch/version.py ("13.2"; empty when not a wheel).
set(MERIDIAN_TORCH_CUDA "")
if(EXISTS ${MERIDIAN_TORCH_SITE}/torch/version.py)
  file(STRINGS ${MERIDIAN_TORCH_SITE}/torch/version.py _cuda_line REGEX "^cuda[:= ]")
  string(REGEX MATCH "'([0-9.]+)'" _m "${_cuda_line}")
  set(MERIDIAN_TORCH_CUDA "${CMAKE_MATCH_1}")
endif()

if(NOT CUDAToolkit_ROOT)
  get_filename_component(_venv_cuda "${MERIDIAN_TORCH_SITE}/../../../cuda" ABSOLUTE)
  if(NOT EXISTS ${_venv_cuda}/bin/nvcc)
    message(FATAL_ERROR "meridian: no CUDA toolkit for LibTorch ${MERIDIAN_TORCH_SITE}/torch (CUDA ${MERIDIAN_TORCH_CUDA}): "
                        "${_venv_cuda}/bin/nvcc is missing. jobs/setup-node.sh installs LibTorch's own (nvcc and "
                        "headers as wheels); or name a toolkit of the same CUDA major version with -DCUDAToolkit_ROOT=DIR.")
  endif()
  set(CUDAToolkit_ROOT ${_venv_cuda} CACHE PATH "CUDA toolkit (default: the environment's own, jobs/setup-node.sh)")
  set(MERIDIAN_CUDA_FROM "the environment's wheels")
else()
  set(MERIDIAN_CUDA_FROM "named by CUDAToolkit_ROOT")
endif()
# The toolkit's version from its cuda.h (CUDA_VERSION 12080), before anything runs its nvcc.
set(_cuda_h "")
foreach(_dir ${CUDAToolkit_ROOT}/include ${CUDAToolkit_ROOT}/targets/x86_64-linux/include)
  if(NOT _cuda_h AND EXISTS ${_dir}/cuda.h)
    set(_cuda_h ${_dir}/cuda.h)
  endif()
endforeach()
if(NOT _cuda_h)
  message(FATAL_ERROR "meridian: CUDAToolkit_ROOT=${CUDAToolkit_ROOT} is not a CUDA toolkit (no include/cuda.h)")
endif()
file(STRINGS ${_cuda_h} _cuda_line REGEX "^#define CUDA_VERSION [0-9]+")
string(REGEX MATCH "[0-9]+$" _cuda_code "${_cuda_line}")
math(EXPR _major "${_cuda_code} / 1000")
math(EXPR _minor "${_cuda_code} % 1000 / 10")
set(MERIDIAN_TOOLKIT_CUDA "${_major}.${_minor}")
if(MERIDIAN_TORCH_CUDA)
  string(REGEX MATCH "^[0-9]+" _torch_major "${MERIDIAN_TORCH_CUDA}")
  if(NOT _torch_major EQUAL _major)
    message(FATAL_ERROR "meridian: the CUDA toolkit at ${CUDAToolkit_ROOT} is CUDA ${MERIDIAN_TOOLKIT_CUDA} (${MERIDIAN_CUDA_FROM}) "
                        "but LibTorch ${MERIDIAN_TORCH_SITE}/torch is built with CUDA ${MERIDIAN_TORCH_CUDA}: the major "
                        "versions must match. Leave CUDAToolkit_ROOT unset to use the environment's own "
                        "(jobs/setup-node.sh), or choose the track of that CUDA (MERIDIAN_TORCH_TRACK, docs/running.md).")
  endif()
endif()
# FindCUDA (LibTorch's package calls it) and enable_language(CUDA) look for nvcc by their own variables.
if(NOT CUDA_TOOLKIT_ROOT_DIR)
  set(CUDA_TOOLKIT_ROOT_DIR ${CUDAToolkit_ROOT} CACHE PATH "FindCUDA's root: CUDAToolkit_ROOT")
endif()
if(NOT CMAKE_CUDA_COMPILER AND EXISTS ${CUDAToolkit_ROOT}/bin/nvcc)
  set(CMAKE_CUDA_COMPILER ${CUDAToolkit_ROOT}/bin/nvcc CACHE FILEPATH "nvcc of CUDAToolkit_ROOT")
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
