# The Python whose torch is this LibTorch (the setup's environment, or python3 where
# TORCH_PREFIX names its torch): tests/python checks troupe's files with it. Empty when
# none is: those tests skip, saying so.
set(TROUPE_TORCH_PYTHON "" CACHE FILEPATH "Python whose torch package is the LibTorch built against")
execute_process(COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/torch-env.sh python
                OUTPUT_VARIABLE setup_python OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
find_program(system_python python3)
get_filename_component(our_torch "${TROUPE_TORCH_PREFIX}" REALPATH)
set(torch_python "")
# The one named before, if its torch is still this LibTorch, else the first whose is.
foreach(python ${TROUPE_TORCH_PYTHON} ${setup_python} ${system_python})
  if(NOT EXISTS "${python}")
    continue()
  endif()
  # Where its torch package lies, without importing it (that loads every CUDA library).
  execute_process(COMMAND ${python} -c "import importlib.util as u; print(u.find_spec('torch').submodule_search_locations[0])"
                  OUTPUT_VARIABLE python_torch OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(python_torch AND EXISTS "${python_torch}")
    get_filename_component(python_torch "${python_torch}" REALPATH)
    if(python_torch STREQUAL our_torch)
      set(torch_python "${python}")
      break()
    endif()
  endif()
endforeach()
set(TROUPE_TORCH_PYTHON "${torch_python}" CACHE FILEPATH "Python whose torch package is the LibTorch built against"
    FORCE)
