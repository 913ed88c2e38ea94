#include "runtime/console.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace troupe {

ProgressStyle progress_style() {
  const char* relay = std::getenv("TROUPE_PROGRESS");
  if (relay != nullptr && std::strcmp(relay, "relay") == 0) return ProgressStyle::relay;
  return isatty(STDOUT_FILENO) ? ProgressStyle::terminal : ProgressStyle::plain;
}

void show_progress(ProgressStyle style, const std::string& line) {
  switch (style) {
    case ProgressStyle::terminal:
      std::printf("\r%s\x1b[K", line.c_str());
      break;
    case ProgressStyle::relay:
      std::printf("\x1e%s\n", line.c_str());
      break;
    case ProgressStyle::plain:
      std::printf("%s\n", line.c_str());
      break;
  }
  std::fflush(stdout);
}

void end_progress(ProgressStyle style) {
  if (style == ProgressStyle::terminal) std::printf("\n");
  std::fflush(stdout);
}

}  // namespace troupe
