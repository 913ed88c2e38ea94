#include "runtime/data/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "base/check.hpp"

namespace troupe {

Result<std::shared_ptr<const MappedFile>> MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string why = S_ISDIR(st.st_mode) ? "it is a directory" : std::strerror(errno);
    ::close(fd);
    return make_error(fmt::format("cannot read '{}': {}", path, why));
  }
  void* base = nullptr;
  if (st.st_size > 0) {
    base = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
      const int error = errno;
      ::close(fd);
      return make_error(fmt::format("cannot map '{}': {}", path, std::strerror(error)));
    }
    // Samples are read from anywhere in the file: read-ahead would only fill memory.
    ::madvise(base, static_cast<size_t>(st.st_size), MADV_RANDOM);
  }
  return std::shared_ptr<const MappedFile>(new MappedFile(path, fd, st.st_size, base));
}

MappedFile::~MappedFile() {
  if (base_ != nullptr) ::munmap(const_cast<std::byte*>(base_), static_cast<size_t>(size_));
  if (fd_ >= 0) ::close(fd_);
}

void MappedFile::read(int64_t offset, int64_t count, void* out) const {
  TROUPE_CHECK(offset >= 0 && count >= 0 && offset <= size_ - count, "read outside the mapped file");
  if (count == 0) return;
  std::memcpy(out, base_ + offset, static_cast<size_t>(count));
  // A fault maps more than the page it touched (fault-around, and a file's large folios up
  // to 2 MiB): the range given back is the read's, widened to 2 MiB boundaries.
  constexpr int64_t kSpan = int64_t{2} << 20;
  const int64_t first = offset / kSpan * kSpan;
  const int64_t end = std::min(size_, (offset + count + kSpan - 1) / kSpan * kSpan);
  ::madvise(const_cast<std::byte*>(base_) + first, static_cast<size_t>(end - first), MADV_DONTNEED);
}

}  // namespace troupe
