#include "memory/nvme_index.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "memory/crc32c.hpp"

namespace troupe {
namespace {

// Layout (host byte order; the tier never leaves the machine that wrote it):
// magic[8] | bytes u64 | block_size u32 | reserved u32 | count u64 | checksums u32[count] | crc32c of all
// before
constexpr char magic[8] = {'T', 'R', 'P', 'I', 'D', 'X', '0', '1'};
constexpr std::size_t header_bytes = 8 + 8 + 4 + 4 + 8;
// 2^26 blocks is 64 TiB at 1 MiB: anything larger is a damaged file, not an index.
constexpr uint64_t max_blocks = uint64_t{1} << 26;

template <class T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

template <class T>
T get(const std::string& in, std::size_t at) {
  T value;
  std::memcpy(&value, in.data() + at, sizeof value);
  return value;
}

Status write_all(int fd, const std::string& text, const std::string& path) {
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return make_error(
          fmt::format("writing the index {} failed: {}", path, n < 0 ? std::strerror(errno) : "no progress"));
    done += static_cast<std::size_t>(n);
  }
  return {};
}

Result<std::string> read_all(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      return make_error(fmt::format("{} does not exist: this key was never written completely", path));
    return make_error(fmt::format("opening the index {} failed: {}", path, std::strerror(errno)));
  }
  std::string text;
  char chunk[65536];
  while (true) {
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      return make_error(fmt::format("reading the index {} failed: {}", path, std::strerror(e)));
    }
    if (n == 0) break;
    text.append(chunk, static_cast<std::size_t>(n));
    if (text.size() > header_bytes + 4 * max_blocks + 4) break;  // damaged: caught below
  }
  ::close(fd);
  return text;
}

}  // namespace

Status save_index(const std::string& path, const KeyIndex& index) {
  std::string text(magic, sizeof magic);
  put(text, index.bytes);
  put(text, index.block_size);
  put(text, uint32_t{0});
  put(text, static_cast<uint64_t>(index.checksums.size()));
  for (uint32_t c : index.checksums) put(text, c);
  put(text, crc32c(text.data(), text.size()));

  std::string temporary = path + ".tmp";
  int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return make_error(fmt::format("creating the index {} failed: {}", temporary, std::strerror(errno)));
  Status written = write_all(fd, text, temporary);
  if (::close(fd) != 0 && written.ok())
    written = make_error(fmt::format("closing the index {} failed: {}", temporary, std::strerror(errno)));
  if (written.ok() && ::rename(temporary.c_str(), path.c_str()) != 0)
    written = make_error(fmt::format("renaming {} to {} failed: {}", temporary, path, std::strerror(errno)));
  if (!written.ok()) ::unlink(temporary.c_str());
  return written;
}

Result<KeyIndex> load_index(const std::string& path) {
  auto text = read_all(path);
  if (!text) return text.error();
  const std::string& t = *text;
  if (t.size() < header_bytes + 4 || std::memcmp(t.data(), magic, sizeof magic) != 0)
    return make_error(fmt::format("{} is not a troupe NVMe index (wrong magic or too short)", path));
  KeyIndex index;
  index.bytes = get<uint64_t>(t, 8);
  index.block_size = get<uint32_t>(t, 16);
  uint64_t count = get<uint64_t>(t, 24);
  if (count > max_blocks || t.size() != header_bytes + 4 * count + 4 ||
      crc32c(t.data(), t.size() - 4) != get<uint32_t>(t, t.size() - 4))
    return make_error(
        fmt::format("the index {} is damaged: its length or its own checksum does not match", path));
  index.checksums.resize(count);
  if (count > 0) std::memcpy(index.checksums.data(), t.data() + header_bytes, 4 * count);
  if (index.block_size == 0 || index.blocks() != count)
    return make_error(fmt::format("the index {} is damaged: {} checksums for {} bytes in blocks of {}", path,
                                  count, index.bytes, index.block_size));
  return index;
}

}  // namespace troupe
