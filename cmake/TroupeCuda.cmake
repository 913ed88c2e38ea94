# The CUDA backend is compiled whenever a CUDA toolkit (nvcc) is found — a machine without a
# GPU still builds and links it, and its gpu tests skip — and left out otherwise.
# Sets TROUPE_HAVE_CUDA and TROUPE_HAVE_NCCL; architectures default to 90 (H100/H200).
option(TROUPE_CUDA "Build the CUDA backend when a CUDA toolkit is found" ON)
# On (the Makefile's choice): where a CUDA toolkit is found, the backend must come out whole,
# NCCL and LibTorch's CUDA included, or the configure step fails, so that CI notices a part
# of the GPU path that stopped being built instead of building less of it.
option(TROUPE_REQUIRE_CUDA "With a CUDA toolkit, fail unless NCCL and a LibTorch with CUDA are found too" OFF)
set(TROUPE_HAVE_CUDA OFF)
set(TROUPE_HAVE_NCCL OFF)
set(TROUPE_TORCH_CUDA OFF)  # the LibTorch found has CUDA (PyTorch's wheels do)
if(TROUPE_CUDA)
  include(CheckLanguage)
  check_language(CUDA)
  # nvcc off PATH but in the toolkit's usual home (a fresh machine's shell): use it there.
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  if(CMAKE_CUDA_COMPILER)
    # LibTorch's CMake (found before this) sets CMAKE_CUDA_ARCHITECTURES to OFF in our scope,
    # hiding a -D value: drop that, and default to 90 (H100/H200) when nothing is given.
    if(CMAKE_CUDA_ARCHITECTURES STREQUAL "OFF")
      unset(CMAKE_CUDA_ARCHITECTURES)
    endif()
    if(NOT CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)  # one CUDA runtime in every binary, LibTorch's too
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    if(CCACHE_PROGRAM)
      set(CMAKE_CUDA_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
    endif()
    find_package(CUDAToolkit REQUIRED)
    set(TROUPE_HAVE_CUDA ON)
    # NCCL: the one LibTorch loads (PyTorch's wheel carries it, site-packages/nvidia/nccl),
    # so that a process has one; else the toolkit's.
    get_filename_component(torch_nccl "${TROUPE_TORCH_PREFIX}/../nvidia/nccl" ABSOLUTE)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${torch_nccl}/include ${CUDAToolkit_INCLUDE_DIRS} NO_DEFAULT_PATH)
    find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${torch_nccl}/lib ${CUDAToolkit_LIBRARY_DIR}
                 NO_DEFAULT_PATH)
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      set(TROUPE_HAVE_NCCL ON)
    endif()
    if(TORCH_CUDA_LIBRARIES)
      set(TROUPE_TORCH_CUDA ON)
    endif()
  endif()
endif()
message(STATUS "troupe: CUDA backend ${TROUPE_HAVE_CUDA} (architectures ${CMAKE_CUDA_ARCHITECTURES}), "
               "NCCL ${TROUPE_HAVE_NCCL} (${NCCL_LIBRARY}), LibTorch with CUDA ${TROUPE_TORCH_CUDA}")
if(TROUPE_REQUIRE_CUDA AND TROUPE_HAVE_CUDA AND NOT (TROUPE_HAVE_NCCL AND TROUPE_TORCH_CUDA))
  message(FATAL_ERROR "troupe: TROUPE_REQUIRE_CUDA is on and a CUDA toolkit is here, but NCCL is "
                      "${TROUPE_HAVE_NCCL} and LibTorch with CUDA ${TROUPE_TORCH_CUDA} (LibTorch at "
                      "${TROUPE_TORCH_PREFIX}): the GPU path would not be built whole")
endif()

# Strict warnings for CUDA sources: on the host compiler, and nvcc's own as errors.
function(troupe_strict_cuda target)
  target_compile_options(${target} PRIVATE
    "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Werror;--Werror=all-warnings>")
endfunction()
