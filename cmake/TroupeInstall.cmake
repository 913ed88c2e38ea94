# `make install`: the libraries, the troupe program, the headers and a CMake package,
# so that an outside project can find_package(troupe) and link troupe::troupe.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TROUPE_LIBRARIES troupe_base troupe_kernels troupe_memory troupe_optim troupe_pipeline troupe_transport troupe_actors troupe_front troupe_monitor troupe_runtime)
if(TROUPE_HAVE_CUDA)
  list(APPEND TROUPE_LIBRARIES troupe_kernels_cuda)
endif()
install(TARGETS ${TROUPE_LIBRARIES} EXPORT troupeTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS troupe RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# troupe finds troupe-core at ../libexec/troupe from its own directory (cli/core_program.hpp).
install(TARGETS troupe-core RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/troupe)

# The public headers are include/troupe/troupe.hpp, scheduler.hpp, loss_scaler.hpp and tensor_parallel.hpp; the layer headers
# they include go under include/troupe/internal, keeping their folder names.
install(FILES ${PROJECT_SOURCE_DIR}/include/troupe/troupe.hpp ${PROJECT_SOURCE_DIR}/include/troupe/scheduler.hpp
  ${PROJECT_SOURCE_DIR}/include/troupe/loss_scaler.hpp ${PROJECT_SOURCE_DIR}/include/troupe/tensor_parallel.hpp
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/troupe)
foreach(layer base kernels memory optim pipeline transport actors runtime)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${layer}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/troupe/internal/${layer}
    FILES_MATCHING PATTERN "*.hpp")
endforeach()

# include/troupe/fmt-first: a link to Debian's fmt headers, which an outside project puts
# before LibTorch's bundled fmt (troupeConfig.cmake does, on troupe::troupe).
install(CODE "set(fmt_first \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_INCLUDEDIR}/troupe/fmt-first\")
  file(MAKE_DIRECTORY \"\${fmt_first}\")
  file(CREATE_LINK \"${TROUPE_SYSTEM_FMT_INCLUDE}/fmt\" \"\${fmt_first}/fmt\" SYMBOLIC)")

install(EXPORT troupeTargets NAMESPACE troupe:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/troupe)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/troupeConfig.cmake.in
  ${PROJECT_BINARY_DIR}/troupeConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/troupe)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/troupeConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/troupeConfig.cmake ${PROJECT_BINARY_DIR}/troupeConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/FindCAF.cmake DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/troupe)
