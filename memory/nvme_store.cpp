#include "memory/nvme_store.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "memory/nvme_engine.hpp"

namespace troupe {
namespace {

Status check_options(const NvmeStoreOptions& o) {
  if (o.block_size == 0 || o.block_size % NvmeStore::alignment != 0 ||
      o.block_size > NvmeStore::max_block_size)
    return make_error(fmt::format("NVMe block size {} must be a positive multiple of {} up to {}",
                                  o.block_size, NvmeStore::alignment, NvmeStore::max_block_size));
  if (o.queue_depth == 0 || o.queue_depth > NvmeStore::max_queue_depth)
    return make_error(fmt::format("NVMe queue depth {} must be between 1 and {}", o.queue_depth,
                                  NvmeStore::max_queue_depth));
  if (o.io_timeout.count() <= 0)
    return make_error(fmt::format("NVMe I/O timeout {} ms must be positive", o.io_timeout.count()));
  return {};
}

Status check_directory(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return make_error(fmt::format("the NVMe directory {} does not exist", dir));
    return make_error(fmt::format("cannot use the NVMe directory {}: {}", dir, std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) return make_error(fmt::format("the NVMe path {} is not a directory", dir));
  return {};
}

// Writes one page to a fresh file in `dir`, directly if asked and the file system allows
// it, to learn before any real work whether the directory is writable and O_DIRECT works.
// Returns whether it was direct; EINVAL on open or write is the file system refusing O_DIRECT.
Result<bool> probe_directory(const std::string& dir, bool try_direct) {
  static std::atomic<unsigned> counter{0};
  std::string path = fmt::format("{}/.troupe-probe.{}.{}", dir, ::getpid(), counter++);
  auto cannot = [&](const char* what, int e) {
    return make_error(fmt::format("cannot write to the NVMe directory {}: {} {} failed: {}", dir, what, path,
                                  std::strerror(e)));
  };
  void* page = nullptr;
  if (posix_memalign(&page, NvmeStore::alignment, NvmeStore::alignment) != 0)
    return make_error("allocating one page for the NVMe directory probe failed");
  std::memset(page, 0, NvmeStore::alignment);
  Result<bool> outcome = try_direct;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | (try_direct ? O_DIRECT : 0), 0644);
  if (fd < 0) {
    outcome = try_direct && errno == EINVAL ? Result<bool>(false) : Result<bool>(cannot("creating", errno));
  } else {
    ssize_t n = ::pwrite(fd, page, NvmeStore::alignment, 0);
    int e = n < 0 ? errno : EIO;  // a short write of one page: report it as an I/O error
    if (n != static_cast<ssize_t>(NvmeStore::alignment))
      outcome =
          try_direct && e == EINVAL ? Result<bool>(false) : Result<bool>(cannot("writing a page to", e));
    ::close(fd);
    ::unlink(path.c_str());
  }
  std::free(page);
  if (outcome.ok() && !*outcome && try_direct) return probe_directory(dir, false);
  return outcome;
}

// Keys are file names in the store's directory; `.index` names are the store's own.
bool valid_key(const std::string& key) {
  auto ends_with = [&](const std::string& suffix) {
    return key.size() >= suffix.size() && key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return !key.empty() && key.size() <= 200 && key != "." && key != ".." &&
         key.find('/') == std::string::npos && key.find('\0') == std::string::npos && !ends_with(".index") &&
         !ends_with(".index.tmp");
}

}  // namespace

Result<std::unique_ptr<NvmeStore>> NvmeStore::open(const std::string& dir, NvmeStoreOptions options) {
  TROUPE_TRY(check_options(options));
  std::string root = dir;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  TROUPE_TRY(check_directory(root));
  auto direct = probe_directory(root, options.direct_io != DirectIo::never);
  if (!direct) return direct.error();
  std::string buffered_reason;
  if (options.direct_io == DirectIo::never) {
    buffered_reason = fmt::format("{}: direct I/O is turned off, so I/O goes through the page cache", root);
  } else if (!*direct) {
    buffered_reason = fmt::format(
        "{}: the file system there refuses O_DIRECT (EINVAL), so I/O goes through the page cache", root);
    if (options.direct_io == DirectIo::require)
      return make_error(fmt::format("direct I/O is required, but {}", buffered_reason));
  }
  auto engine = Engine::make(root, std::move(options), *direct);
  if (!engine) return engine.error();
  return std::unique_ptr<NvmeStore>(new NvmeStore(std::move(*engine), std::move(buffered_reason)));
}

NvmeStore::NvmeStore(std::unique_ptr<Engine> engine, std::string buffered_reason)
    : engine_(std::move(engine)), buffered_reason_(std::move(buffered_reason)) {}

const std::string& NvmeStore::buffered_reason() const {
  return buffered_reason_;
}

NvmeStore::~NvmeStore() = default;

namespace {

std::unique_ptr<NvmeOp> make_op(NvmeOp::Kind kind, const std::string& key, const void* data,
                                std::size_t bytes, IoCallback done, const std::string& dir) {
  auto op = std::make_unique<NvmeOp>();
  op->kind = kind;
  op->key = key;
  op->path = dir + "/" + key;
  op->data = static_cast<std::byte*>(const_cast<void*>(data));
  op->bytes = bytes;
  op->done = std::move(done);
  if (!valid_key(key))
    op->status =
        make_error(fmt::format("{} key \"{}\" of the NVMe store in {}: a key is a file name (no '/', "
                               "not . or .., at most 200 bytes, not ending in .index)",
                               op->verb(), key, dir));
  else if (bytes > 0 && reinterpret_cast<uintptr_t>(data) % NvmeStore::alignment != 0)
    op->status =
        make_error(fmt::format("{} {} bytes of {}: the buffer at {} is not {}-byte aligned (use an "
                               "AlignedPool buffer)",
                               op->verb(), bytes, op->path, data, NvmeStore::alignment));
  return op;
}

}  // namespace

void NvmeStore::write(const std::string& key, const void* data, std::size_t bytes, IoCallback done) {
  engine_->submit(make_op(NvmeOp::Kind::write, key, data, bytes, std::move(done), dir()));
}

void NvmeStore::read(const std::string& key, void* data, std::size_t bytes, IoCallback done) {
  engine_->submit(make_op(NvmeOp::Kind::read, key, data, bytes, std::move(done), dir()));
}

bool NvmeStore::direct() const {
  return engine_->direct_;
}

const std::string& NvmeStore::dir() const {
  return engine_->dir_;
}

const NvmeStoreOptions& NvmeStore::options() const {
  return engine_->options_;
}

std::string NvmeStore::path_of(const std::string& key) const {
  return engine_->path_of(key);
}

Status make_directory(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST) return {};
  return make_error(fmt::format("creating {} failed: {}", dir, std::strerror(errno)));
}

}  // namespace troupe
