# CAF 0.17 ships neither a CMake package nor a pkg-config file: find it by hand and
# expose it as the imported target CAF::caf (caf_io must precede caf_core when linking).
find_path(CAF_INCLUDE_DIR caf/all.hpp REQUIRED)
find_library(CAF_CORE_LIBRARY caf_core REQUIRED)
find_library(CAF_IO_LIBRARY caf_io REQUIRED)
if(NOT TARGET CAF::caf)
  add_library(CAF::caf INTERFACE IMPORTED)
  set_target_properties(CAF::caf PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${CAF_IO_LIBRARY};${CAF_CORE_LIBRARY};Threads::Threads")
endif()
