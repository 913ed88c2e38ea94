#include "memory/uring_file.hpp"

#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include <fmt/format.h>

namespace troupe {
namespace {

Error failed(const char* what, const std::string& path, int error_number) {
  return make_error(fmt::format("{} {} failed: {}", what, path, std::strerror(error_number)));
}

// One request's part of the file still to be written; a short write leaves its tail here.
struct Piece {
  std::size_t offset = 0;
  std::size_t left = 0;
};

class UringFile {
 public:
  UringFile(std::string path, const UringFileOptions& options) : path_(std::move(path)), options_(options) {}
  ~UringFile() {
    if (ring_ready_) io_uring_queue_exit(&ring_);
    if (fd_ >= 0) ::close(fd_);
  }
  UringFile(const UringFile&) = delete;
  UringFile& operator=(const UringFile&) = delete;

  Status open() {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) return failed("creating", path_, errno);
    if (int rc = io_uring_queue_init(options_.depth + 1, &ring_, 0); rc < 0)
      return failed("setting up io_uring for", path_, -rc);
    ring_ready_ = true;
    return {};
  }

  Status write(const char* data, std::size_t bytes) {
    std::vector<Piece> pieces(options_.depth);
    std::size_t next = 0;
    unsigned in_flight = 0;
    for (;;) {
      for (std::size_t slot = 0; slot < pieces.size() && next < bytes; ++slot) {
        if (pieces[slot].left != 0) continue;
        pieces[slot] = Piece{next, std::min(options_.chunk_bytes, bytes - next)};
        next += pieces[slot].left;
        queue_write(data, pieces[slot], slot);
        ++in_flight;
      }
      if (in_flight == 0) return {};
      io_uring_submit(&ring_);
      auto done = reap();
      if (!done) return done.error();
      Piece& piece = pieces[done->first];
      const int res = done->second;
      if (res < 0) return failed("writing", path_, -res);
      if (res == 0) return failed("writing", path_, ENOSPC);
      piece.offset += static_cast<std::size_t>(res);
      piece.left -= static_cast<std::size_t>(res);
      if (piece.left != 0) {
        queue_write(data, piece, done->first);  // a short write: the rest of this piece again
      } else {
        --in_flight;
      }
    }
  }

  Status sync() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    io_uring_prep_fsync(sqe, fd_, 0);
    io_uring_sqe_set_data64(sqe, 0);
    io_uring_submit(&ring_);
    auto done = reap();
    if (!done) return done.error();
    if (done->second < 0) return failed("syncing", path_, -done->second);
    return {};
  }

  Status close() {
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return failed("closing", path_, errno);
    return {};
  }

 private:
  void queue_write(const char* data, const Piece& piece, std::size_t slot) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    io_uring_prep_write(sqe, fd_, data + piece.offset, static_cast<unsigned>(piece.left), piece.offset);
    io_uring_sqe_set_data64(sqe, slot);
  }

  // The next completion as (slot, result); bounded by the timeout, so a lost disk is an error.
  Result<std::pair<std::size_t, int>> reap() {
    const auto ms = options_.timeout.count();
    __kernel_timespec timeout{ms / 1000, (ms % 1000) * 1000000};
    io_uring_cqe* cqe = nullptr;
    int rc;
    do {
      rc = io_uring_wait_cqe_timeout(&ring_, &cqe, &timeout);
    } while (rc == -EINTR);
    if (rc == -ETIME)
      return make_error(
          fmt::format("writing {}: no write completed within {} ms; the disk is not answering", path_, ms));
    if (rc < 0) return failed("waiting on io_uring for", path_, -rc);
    std::pair<std::size_t, int> done{static_cast<std::size_t>(io_uring_cqe_get_data64(cqe)), cqe->res};
    io_uring_cqe_seen(&ring_, cqe);
    return done;
  }

  std::string path_;
  UringFileOptions options_;
  int fd_ = -1;
  io_uring ring_{};
  bool ring_ready_ = false;
};

}  // namespace

Status write_file_uring(const std::string& path, const void* data, std::size_t bytes,
                        const UringFileOptions& options) {
  UringFile file(path, options);
  TROUPE_TRY(file.open());
  TROUPE_TRY(file.write(static_cast<const char*>(data), bytes));
  TROUPE_TRY(file.sync());
  return file.close();
}

}  // namespace troupe
