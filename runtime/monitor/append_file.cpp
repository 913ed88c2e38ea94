#include "runtime/monitor/append_file.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace troupe {

Status append_whole(int fd, const std::string& bytes, const std::string& path) {
  const off_t before = ::lseek(fd, 0, SEEK_END);
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      // Character devices (/dev/full) cannot seek nor be cut: nothing was kept there anyway.
      if (before >= 0 && done > 0 && ::ftruncate(fd, before) == 0) ::lseek(fd, before, SEEK_SET);
      return make_error(fmt::format("cannot write {}: {}", path, std::strerror(error)));
    }
    done += static_cast<std::size_t>(n);
  }
  return {};
}

}  // namespace troupe
