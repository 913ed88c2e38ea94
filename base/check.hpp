// Always-on invariant checks. A failed check is a bug in troupe: it prints the file,
// line and message and aborts. Operating errors use Result (result.hpp) instead.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace troupe::detail {
[[noreturn]] inline void check_failed(const char* file, int line, const char* condition,
                                      const char* message) {
  std::fprintf(stderr, "troupe: invariant violated at %s:%d: %s (%s)\n", file, line, message, condition);
  std::fflush(stderr);
  std::abort();
}
}  // namespace troupe::detail

#define TROUPE_CHECK(condition, message)                                                       \
  do {                                                                                         \
    if (!(condition)) ::troupe::detail::check_failed(__FILE__, __LINE__, #condition, message); \
  } while (0)
