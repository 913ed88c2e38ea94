// A memory file system (tmpfs, or ramfs, which refuses O_DIRECT) mounted on a test's
// directory, unmounted when the object goes: for tests that fill a disk, make one
// read-only or need a file system without direct I/O. Mounting takes root; mounted() says
// whether it worked and error() why not, so the test can skip with the reason.
#pragma once

#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace troupe::testing {

class MemoryMount {
 public:
  MemoryMount(const std::string& dir, const std::string& options, unsigned long flags = 0,
              const char* type = "tmpfs")
      : dir_(dir) {
    mounted_ = ::mount(type, dir.c_str(), type, flags, options.c_str()) == 0;
    error_ = mounted_ ? "" : std::strerror(errno);
  }
  ~MemoryMount() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  MemoryMount(const MemoryMount&) = delete;
  MemoryMount& operator=(const MemoryMount&) = delete;
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }

 private:
  std::string dir_;
  bool mounted_ = false;
  std::string error_;
};

}  // namespace troupe::testing
