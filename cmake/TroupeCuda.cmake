# The CUDA backend is compiled whenever a CUDA toolkit (nvcc) is found — a machine without a
# GPU still builds and links it, and its gpu tests skip — and left out otherwise.
# Sets TROUPE_HAVE_CUDA and TROUPE_HAVE_NCCL; architectures default to 90 (H100/H200).
option(TROUPE_CUDA "Build the CUDA backend when a CUDA toolkit is found" ON)
set(TROUPE_HAVE_CUDA OFF)
set(TROUPE_HAVE_NCCL OFF)
if(TROUPE_CUDA)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    if(CCACHE_PROGRAM)
      set(CMAKE_CUDA_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
    endif()
    find_package(CUDAToolkit REQUIRED)
    set(TROUPE_HAVE_CUDA ON)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      set(TROUPE_HAVE_NCCL ON)
    endif()
  endif()
endif()
message(STATUS "troupe: CUDA backend ${TROUPE_HAVE_CUDA} (architectures ${CMAKE_CUDA_ARCHITECTURES}), "
               "NCCL ${TROUPE_HAVE_NCCL}")

# Strict warnings for CUDA sources: on the host compiler, and nvcc's own as errors.
function(troupe_strict_cuda target)
  target_compile_options(${target} PRIVATE
    "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Werror;--Werror=all-warnings>")
endfunction()
