// A read-only file mapped into memory, read a range at a time.
//
// Pages a read touched are given back to the kernel after it (madvise DONTNEED on a
// read-only shared mapping drops them from this process, not from the page cache; a read
// that runs at the same time in the same range faults them in again), so the
// resident memory of a reader stays at the size of what it is copying, whatever the size of
// the file: a 4 GB corpus is read by a loader of a few MB.
// Thread safety: immutable once opened; read() may be called from any thread at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/result.hpp"

namespace troupe {

class MappedFile {
 public:
  /// Maps `path` for reading; fails naming the path when it cannot be opened or mapped.
  static Result<std::shared_ptr<const MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return size_; }
  /// Copies bytes [offset, offset + count) into `out`, then lets the pages go. The range
  /// must lie inside the file (a bug otherwise).
  void read(int64_t offset, int64_t count, void* out) const;

 private:
  MappedFile(std::string path, int fd, int64_t size, void* base)
      : path_(std::move(path)), fd_(fd), size_(size), base_(static_cast<const std::byte*>(base)) {}

  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
  const std::byte* base_ = nullptr;  // null for an empty file
};

}  // namespace troupe
