# TROUPE_SANITIZE: compile and link every target of the project under a sanitizer
# (scripts/sanitize.sh configures build-asan/ and build-tsan/ with it):
#   address  AddressSanitizer + UndefinedBehaviorSanitizer, any UB report fatal
#   thread   ThreadSanitizer
# Only our code is instrumented: LibTorch, CAF, UCX and the other Debian packages are linked
# as they are, which is why scripts/tsan.supp and scripts/lsan.supp exist.
set(TROUPE_SANITIZE "" CACHE STRING "Sanitizer for every target: empty, address (ASan+UBSan) or thread (TSan)")
set_property(CACHE TROUPE_SANITIZE PROPERTY STRINGS "" address thread)

if(TROUPE_SANITIZE STREQUAL "address")
  # Null checks are recoverable only so that scripts/ubsan.supp can name one in CAF's headers;
  # UBSAN_OPTIONS=halt_on_error=1 (scripts/sanitize.sh) keeps every other report fatal.
  set(TROUPE_SANITIZE_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined
                            -fsanitize-recover=null)
elseif(TROUPE_SANITIZE STREQUAL "thread")
  set(TROUPE_SANITIZE_FLAGS -fsanitize=thread)
  # LibTorch 2's headers inline a std::atomic_thread_fence (c10's PyObjectSlot, for Python
  # objects troupe never makes), which GCC warns TSan cannot model; the warning is about
  # LibTorch's code, not ours.
  set(TROUPE_SANITIZE_WARNINGS -Wno-tsan)
elseif(NOT TROUPE_SANITIZE STREQUAL "")
  message(FATAL_ERROR "TROUPE_SANITIZE is '${TROUPE_SANITIZE}': use address, thread or nothing")
endif()

if(TROUPE_SANITIZE_FLAGS)
  # Frame pointers for the reports' stacks; -O1 because it compiles faster than the build
  # type's -O2 and keeps the stacks readable. Later options win, so this overrides -O2,
  # and a target's own (kernels' -O3) overrides it in turn.
  # GCC's -Wmaybe-uninitialized misfires on instrumented code (std::optional's payload, GCC's
  # documented caveat for -fsanitize): the normal build keeps checking it under -Werror.
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${TROUPE_SANITIZE_FLAGS};-fno-omit-frame-pointer;-O1>"
                      "$<$<COMPILE_LANGUAGE:CXX>:-Wno-maybe-uninitialized;${TROUPE_SANITIZE_WARNINGS}>")
  add_link_options(${TROUPE_SANITIZE_FLAGS})
  message(STATUS "troupe: sanitizer ${TROUPE_SANITIZE} (${TROUPE_SANITIZE_FLAGS})")
endif()
