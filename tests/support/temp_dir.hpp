// Fresh temporary directories for tests, removed with everything in them when the test
// program exits (a crash or ctest's timeout kill leaves them). A test run must leave the disk as it found it:
// CI's machine shares its disk, and an installed prefix or a checkpoint left behind per run fills it within
// days. TROUPE_KEEP_TEST_DIRS=1 keeps them, to look at what a failing test wrote.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace troupe::testing {

class TempDirRegistry {
 public:
  static TempDirRegistry& instance() {
    static TempDirRegistry registry;
    return registry;
  }

  void add(std::string dir) {
    std::lock_guard<std::mutex> lock(mutex_);
    dirs_.push_back(std::move(dir));
  }

  ~TempDirRegistry() {
    // A forked child that exits normally runs this too; only the process that made them removes.
    const char* keep = std::getenv("TROUPE_KEEP_TEST_DIRS");
    if (::getpid() != owner_ || (keep != nullptr && std::string(keep) == "1")) return;
    for (const auto& dir : dirs_) {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  }

 private:
  TempDirRegistry() = default;

  pid_t owner_ = ::getpid();
  std::mutex mutex_;
  std::vector<std::string> dirs_;
};

/// A new empty directory named `prefix`XXXXXX under `under`, by default $TMPDIR (or /tmp);
/// empty on failure.
inline std::string make_temp_dir(const std::string& prefix = "troupe-test-", std::string under = "") {
  std::error_code error;
  if (under.empty()) under = std::filesystem::temp_directory_path(error).string();
  if (error || under.empty()) under = "/tmp";
  std::string pattern = (std::filesystem::path(under) / (prefix + "XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) return {};
  TempDirRegistry::instance().add(pattern);
  return pattern;
}

}  // namespace troupe::testing
