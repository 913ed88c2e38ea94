# Finds the one LibTorch troupe builds against: LibTorch 2.x with the C++11 ABI, from
#   1. TORCH_PREFIX (a -D value or the environment's): a LibTorch's folder, or the folder
#      `torch.utils.cmake_prefix_path` names (such as a GPU machine's own PyTorch);
#   2. else Torch_DIR or CMAKE_PREFIX_PATH, when either leads to one;
#   3. else the Python environment scripts/setup.sh makes (scripts/torch-env.sh names it),
#      asked for its `torch.utils.cmake_prefix_path`.
# System folders are never searched for LibTorch's libraries, so a machine that still has
# Debian's libtorch-dev (LibTorch 1.13) builds against the one found all the same; any
# library of the result outside its prefix stops the configure step (a mix of two).
# Sets TROUPE_TORCH_PREFIX (the LibTorch's root), TROUPE_TORCH_LIBRARY_DIRS (where its
# libraries and the CUDA libraries they load live, for rpaths) and TROUPE_TORCH_SOURCE;
# cmake/TroupeTorchPython.cmake then finds the Python whose torch this is.

set(TORCH_PREFIX "" CACHE PATH "LibTorch 2.x to build against (default: scripts/setup.sh's)")
if(DEFINED ENV{TORCH_PREFIX})  # the environment's, on every configure step, as a -D value would be
  set(TORCH_PREFIX "$ENV{TORCH_PREFIX}" CACHE PATH "LibTorch 2.x to build against" FORCE)
endif()

# The folder holding TorchConfig.cmake under `root`, or "" (root may be LibTorch's own
# folder, its share/cmake, or share/cmake/Torch itself).
function(troupe_torch_config_dir root out)
  set(dir "")
  foreach(suffix share/cmake/Torch Torch "" lib/cmake/Torch)
    if(EXISTS "${root}/${suffix}/TorchConfig.cmake")
      get_filename_component(dir "${root}/${suffix}" ABSOLUTE)
      break()
    endif()
  endforeach()
  set(${out} "${dir}" PARENT_SCOPE)
endfunction()

# The CMake prefix of the environment scripts/setup.sh makes, or "" with `why` saying why not.
function(troupe_torch_from_setup out why)
  execute_process(COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/torch-env.sh cmake-prefix
                  OUTPUT_VARIABLE prefix ERROR_VARIABLE error RESULT_VARIABLE failed
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_STRIP_TRAILING_WHITESPACE)
  if(failed)
    set(${out} "" PARENT_SCOPE)
    set(${why} "${error}" PARENT_SCOPE)
  else()
    set(${out} "${prefix}" PARENT_SCOPE)
  endif()
endfunction()

# Where to look, and what to call it in a refusal.
set(torch_root "")
if(TORCH_PREFIX)
  set(torch_root "${TORCH_PREFIX}")
  set(TROUPE_TORCH_SOURCE "TORCH_PREFIX")
elseif(Torch_DIR AND NOT Torch_DIR STREQUAL TROUPE_TORCH_CHOSEN AND EXISTS "${Torch_DIR}/TorchConfig.cmake")
  set(torch_root "${Torch_DIR}")
  set(TROUPE_TORCH_SOURCE "Torch_DIR")
else()
  string(REPLACE ":" ";" environment_prefixes "$ENV{CMAKE_PREFIX_PATH}")
  foreach(p ${CMAKE_PREFIX_PATH} ${environment_prefixes})
    troupe_torch_config_dir("${p}" dir)
    if(dir)
      set(torch_root "${p}")
      set(TROUPE_TORCH_SOURCE "CMAKE_PREFIX_PATH")
      break()
    endif()
  endforeach()
endif()
if(NOT torch_root)
  troupe_torch_from_setup(torch_root why)
  set(TROUPE_TORCH_SOURCE "scripts/setup.sh's environment")
  if(NOT torch_root)
    message(FATAL_ERROR "troupe: no LibTorch 2.x to build against: ${why}; run scripts/setup.sh (make "
                        "configure does), or set TORCH_PREFIX to a LibTorch 2.x")
  endif()
endif()

troupe_torch_config_dir("${torch_root}" torch_config_dir)
if(NOT torch_config_dir)
  message(FATAL_ERROR "troupe: ${TROUPE_TORCH_SOURCE} ${torch_root} holds no LibTorch (no "
                      "share/cmake/Torch/TorchConfig.cmake under it); point it at a LibTorch 2.x with the C++11 "
                      "ABI, such as the folder Python's torch.utils.cmake_prefix_path names")
endif()

# Its version, read before loading it: LibTorch 1.x's CMake would fail further on, or worse.
set(PACKAGE_FIND_VERSION 2.0)
set(PACKAGE_VERSION "")
if(EXISTS "${torch_config_dir}/TorchConfigVersion.cmake")
  include("${torch_config_dir}/TorchConfigVersion.cmake")
endif()
if(NOT PACKAGE_VERSION OR PACKAGE_VERSION VERSION_LESS 2.0)
  set(found "${PACKAGE_VERSION}")
  if(NOT found)
    set(found "of no stated version")
  endif()
  message(FATAL_ERROR "troupe: ${TROUPE_TORCH_SOURCE} ${torch_root} is LibTorch ${found}; troupe needs "
                      "LibTorch 2.x with the C++11 ABI (scripts/setup.sh installs 2.15.0)")
endif()

# Its CMake looks in the system folders before its own for its Caffe2 package and its
# libraries (find_package, find_library): name each, so that a Debian LibTorch there is
# never taken.
set(Torch_DIR "${torch_config_dir}" CACHE PATH "LibTorch's CMake package folder" FORCE)
# What this configure step chose (even if refused below), so that the next one tells it from
# a Torch_DIR given.
set(TROUPE_TORCH_CHOSEN "${torch_config_dir}" CACHE INTERNAL "")
get_filename_component(caffe2_dir "${torch_config_dir}/../Caffe2" ABSOLUTE)
set(Caffe2_DIR "${caffe2_dir}" CACHE PATH "LibTorch's Caffe2 package folder" FORCE)
get_filename_component(torch_lib_dir "${torch_config_dir}/../../../lib" ABSOLUTE)
foreach(variable_and_name c10_LIBRARY:c10 TORCH_LIBRARY:torch C10_CUDA_LIBRARY:c10_cuda)
  string(REPLACE ":" ";" variable_and_name "${variable_and_name}")
  list(GET variable_and_name 0 variable)
  list(GET variable_and_name 1 name)
  if(EXISTS "${torch_lib_dir}/lib${name}.so")
    set(${variable} "${torch_lib_dir}/lib${name}.so" CACHE FILEPATH "LibTorch's lib${name}" FORCE)
  else()
    unset(${variable} CACHE)  # not one left from another LibTorch
  endif()
endforeach()
# A LibTorch with CUDA (PyTorch's wheel is one) needs a CUDA toolkit to configure against,
# GPU or not: its own CMake stops without one, less clearly.
if(EXISTS "${torch_lib_dir}/libtorch_cuda.so")
  find_program(TROUPE_NVCC nvcc HINTS "$ENV{CUDA_HOME}/bin" /usr/local/cuda/bin)
  if(NOT TROUPE_NVCC AND NOT CMAKE_CUDA_COMPILER)
    message(FATAL_ERROR "troupe: LibTorch ${PACKAGE_VERSION} at ${torch_root} is a CUDA build, whose CMake needs a "
                        "CUDA toolkit (nvcc, 12.6 or later) even for CPU ranks, and none was found (PATH, CUDA_HOME, "
                        "/usr/local/cuda); install one or set TORCH_PREFIX to a CPU build of LibTorch 2.x")
  endif()
endif()

# Its CUDA part takes its architectures from TORCH_CUDA_ARCH_LIST (it would probe for a
# GPU otherwise) and drops a CMAKE_CUDA_ARCHITECTURES it sees: cmake/TroupeCuda.cmake sets ours.
if(NOT DEFINED TORCH_CUDA_ARCH_LIST)
  set(TORCH_CUDA_ARCH_LIST 9.0)
endif()
set(cuda_architectures "${CMAKE_CUDA_ARCHITECTURES}")
unset(CMAKE_CUDA_ARCHITECTURES)
unset(CMAKE_CUDA_ARCHITECTURES CACHE)
find_package(Torch CONFIG REQUIRED NO_DEFAULT_PATH PATHS "${torch_config_dir}")
# (Its CUDA part enabled the language, caching nvcc's default architecture.)
unset(CMAKE_CUDA_ARCHITECTURES)
unset(CMAKE_CUDA_ARCHITECTURES CACHE)
if(cuda_architectures)
  set(CMAKE_CUDA_ARCHITECTURES "${cuda_architectures}" CACHE STRING "CUDA architectures to build for")
endif()
get_filename_component(TROUPE_TORCH_PREFIX "${torch_config_dir}/../../.." ABSOLUTE)

# Its C++ ABI: the flag its CMake states (LibTorch before 2.7), else whether libc10 exports
# any std::__cxx11 symbol (every C++11-ABI build does; 2.7 and later state no flag).
set(torch_abi "C++11")
if(TORCH_CXX_FLAGS MATCHES "_GLIBCXX_USE_CXX11_ABI=0")
  set(torch_abi "pre-C++11 (_GLIBCXX_USE_CXX11_ABI=0)")
elseif(NOT TORCH_CXX_FLAGS MATCHES "_GLIBCXX_USE_CXX11_ABI=1")
  file(GLOB c10_files "${torch_lib_dir}/libc10.so*")
  if(NOT c10_files)
    message(FATAL_ERROR "troupe: ${TROUPE_TORCH_SOURCE} ${torch_root} is LibTorch ${PACKAGE_VERSION} without "
                        "${torch_lib_dir}/libc10.so: troupe needs a LibTorch 2.x of shared libraries")
  endif()
  list(GET c10_files 0 c10_file)
  file(STRINGS "${c10_file}" cxx11_symbols REGEX "__cxx11" LIMIT_COUNT 1)
  if(NOT cxx11_symbols)
    set(torch_abi "pre-C++11 (no std::__cxx11 symbol in ${c10_file})")
  endif()
endif()
if(NOT torch_abi STREQUAL "C++11")
  message(FATAL_ERROR "troupe: ${TROUPE_TORCH_SOURCE} ${torch_root} is LibTorch ${PACKAGE_VERSION} built with the "
                      "${torch_abi} ABI; troupe links Debian's C++ libraries, which use the C++11 ABI: it needs a "
                      "LibTorch 2.x built with _GLIBCXX_USE_CXX11_ABI=1, as PyTorch's wheels are")
endif()

# One LibTorch: every library file it names lies under its own prefix.
set(torch_files ${TORCH_LIBRARIES})
foreach(target torch torch_library torch_cpu torch_cuda c10 c10_cuda)
  if(TARGET ${target})
    get_target_property(location ${target} IMPORTED_LOCATION_RELEASE)
    if(NOT location)
      get_target_property(location ${target} IMPORTED_LOCATION)
    endif()
    if(location)
      list(APPEND torch_files "${location}")
    endif()
  endif()
endforeach()
foreach(file ${torch_files})
  get_filename_component(name "${file}" NAME)
  string(FIND "${file}" "${TROUPE_TORCH_PREFIX}/" at)
  if(IS_ABSOLUTE "${file}" AND name MATCHES "^lib(torch|c10)" AND NOT at EQUAL 0)
    message(FATAL_ERROR "troupe: LibTorch ${PACKAGE_VERSION} at ${TROUPE_TORCH_PREFIX} would link ${file}, a "
                        "library of another LibTorch; remove that one (Debian's libtorch-dev) or set TORCH_PREFIX")
  endif()
endforeach()

# The libraries LibTorch loads: its own, and beside a Python package the CUDA libraries of
# the nvidia-* wheels (site-packages/nvidia/*/lib), which its CUDA library needs at link and
# at load time, on a machine with or without a GPU.
set(TROUPE_TORCH_LIBRARY_DIRS "${TROUPE_TORCH_PREFIX}/lib")
file(GLOB nvidia_dirs LIST_DIRECTORIES true "${TROUPE_TORCH_PREFIX}/../nvidia/*/lib"
     "${TROUPE_TORCH_PREFIX}/../nvidia/*/*/lib")
foreach(dir ${nvidia_dirs})
  if(IS_DIRECTORY "${dir}")
    get_filename_component(dir "${dir}" ABSOLUTE)
    list(APPEND TROUPE_TORCH_LIBRARY_DIRS "${dir}")
  endif()
endforeach()
message(STATUS "troupe: LibTorch ${PACKAGE_VERSION} at ${TROUPE_TORCH_PREFIX} (from ${TROUPE_TORCH_SOURCE})")
