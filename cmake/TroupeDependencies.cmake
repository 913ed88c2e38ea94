# Finds every dependency troupe builds against: Debian 12's packages, and LibTorch 2.x
# (cmake/TroupeTorch.cmake: PyTorch's wheel by default, which scripts/setup.sh installs).
find_package(Threads REQUIRED)
include(TroupeTorch)  # first: a wrong LibTorch stops the configure step before anything else
include(TroupeTorchPython)
find_package(ucx REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(tomlplusplus REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(CLI11 REQUIRED)
find_package(Protobuf REQUIRED)  # TensorBoard's event records (runtime/monitor)
find_package(PkgConfig REQUIRED)
pkg_check_modules(URING REQUIRED IMPORTED_TARGET liburing)
include(FindCAF)

# PyTorch's wheel ships fmt 12's headers in its include folder, which comes before the
# system's; Debian's spdlog is built for Debian's fmt 9. A folder holding only Debian's fmt
# headers goes first on every include path of the project.
# (TroupeInstall.cmake installs the same link for outside projects.)
find_path(TROUPE_SYSTEM_FMT_INCLUDE fmt/format.h PATHS /usr/include NO_DEFAULT_PATH)
if(NOT TROUPE_SYSTEM_FMT_INCLUDE)
  message(FATAL_ERROR "troupe: Debian's fmt headers (libfmt-dev) are missing: run scripts/setup.sh")
endif()
file(MAKE_DIRECTORY ${PROJECT_BINARY_DIR}/fmt-first)
file(CREATE_LINK ${TROUPE_SYSTEM_FMT_INCLUDE}/fmt ${PROJECT_BINARY_DIR}/fmt-first/fmt SYMBOLIC)
include_directories(BEFORE SYSTEM ${PROJECT_BINARY_DIR}/fmt-first)

# Programs find LibTorch's libraries and the CUDA libraries they load (the wheel's, which
# come before the toolkit's: one CUDA runtime and one NCCL in a process) where the build
# found them, in the build tree and installed.
set(CMAKE_BUILD_RPATH ${TROUPE_TORCH_LIBRARY_DIRS})
set(CMAKE_INSTALL_RPATH ${TROUPE_TORCH_LIBRARY_DIRS})
