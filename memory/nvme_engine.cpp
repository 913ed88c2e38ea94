#include "memory/nvme_engine.hpp"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "base/leak.hpp"
#include "memory/crc32c.hpp"

namespace troupe {
namespace {

constexpr uint64_t wakeup_tag = ~uint64_t{0};
// A short write is resubmitted for the rest; this many in a row means the disk is stuck full.
constexpr unsigned max_attempts = 8;

uint64_t round_up_to_page(uint64_t bytes) {
  return (bytes + NvmeStore::alignment - 1) / NvmeStore::alignment * NvmeStore::alignment;
}

Error system_error(const std::string& what, int error_number) {
  return make_error(fmt::format("{} failed: {}", what, std::strerror(error_number)));
}

// The CRC32C of the bytes the caller has in `block`: its whole pages in the caller's
// memory, then (in the last block) the partial page in the bounce page.
uint32_t block_checksum(const NvmeOp& op, uint64_t block) {
  uint64_t begin = op.index.block_offset(block);
  uint64_t end = begin + op.index.block_bytes(block);
  uint64_t pages_end = std::min(end, op.whole_page_bytes());
  uint32_t crc = crc32c(op.data + begin, pages_end - begin);
  if (end > pages_end) crc = crc32c(op.tail_page, end - pages_end, crc);
  return crc;
}

// Data files are opened O_NONBLOCK (no effect on regular files) so that something else
// left at a key's path, a FIFO say, cannot block the completion thread; it is refused here.
Status check_regular_file(int fd, const std::string& path, struct stat& st) {
  if (::fstat(fd, &st) != 0) return system_error("stat of " + path, errno);
  if (!S_ISREG(st.st_mode)) return make_error(fmt::format("{} is not a regular file", path));
  return {};
}

}  // namespace

NvmeStore::Engine::Engine(std::string dir, NvmeStoreOptions options, bool direct)
    : dir_(std::move(dir)), options_(std::move(options)), direct_(direct) {}

Result<std::unique_ptr<NvmeStore::Engine>> NvmeStore::Engine::make(std::string dir, NvmeStoreOptions options,
                                                                   bool direct) {
  std::unique_ptr<Engine> e(new Engine(std::move(dir), std::move(options), direct));
  unsigned entries = e->options_.queue_depth + 1;  // + the eventfd read
  int rc = io_uring_queue_init(entries, &e->ring_, 0);
  if (rc < 0) {
    const char* hint = rc == -EPERM    ? " (is io_uring disabled? see sysctl kernel.io_uring_disabled)"
                       : rc == -ENOMEM ? " (raise the locked-memory limit, ulimit -l)"
                                       : "";
    return make_error(fmt::format("setting up io_uring with {} entries for {} failed: {}{}", entries, e->dir_,
                                  std::strerror(-rc), hint));
  }
  e->ring_ready_ = true;
  e->wakeup_fd_ = eventfd(0, EFD_CLOEXEC);
  if (e->wakeup_fd_ < 0) return system_error("creating the eventfd of the NVMe store in " + e->dir_, errno);
  auto pages = AlignedPool::make({NvmeStore::alignment, e->options_.queue_depth, e->options_.ledger,
                                  MemoryKind::communication, "NVMe bounce pages of " + e->dir_});
  if (!pages) return pages.error();
  e->tail_pages_ = std::move(*pages);
  e->slots_.resize(e->options_.queue_depth);
  for (unsigned s = e->options_.queue_depth; s > 0; --s) e->free_slots_.push_back(s - 1);
  e->thread_ = std::thread([p = e.get()] {
    p->run();
    std::lock_guard<std::mutex> lock(p->mutex_);
    p->returned_ = true;
    p->returned_cv_.notify_all();
  });
  return e;
}

NvmeStore::Engine::~Engine() {
  TROUPE_CHECK(std::this_thread::get_id() != thread_.get_id(),
               "an NvmeStore destroyed from its own callback");
  bool abandoned = false;
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    uint64_t one = 1;
    (void)!::write(wakeup_fd_, &one, sizeof one);
    {
      std::unique_lock<std::mutex> lock(mutex_);
      returned_cv_.wait(lock, [this] { return returned_; });
    }
    abandoned = std::any_of(active_.begin(), active_.end(), [](const auto& op) { return op->in_flight > 0; });
    // The kernel holds the thread's exit until its io-wq requests end, which may be never.
    if (abandoned)
      thread_.detach();
    else
      thread_.join();
  }
  // Requests the device never completed may still write into their pages: leak them, not reuse them.
  if (abandoned) leak_on_purpose(std::move(tail_pages_));
  for (auto& op : active_) {
    if (op->fd >= 0) ::close(op->fd);
    if (op->tail_page != nullptr && !abandoned) tail_pages_->release(op->tail_page);
  }
  if (ring_ready_) io_uring_queue_exit(&ring_);
  if (wakeup_fd_ >= 0) ::close(wakeup_fd_);
}

void NvmeStore::Engine::submit(std::unique_ptr<NvmeOp> op) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // While the destructor drains, the store's own callbacks may still chain more work.
    TROUPE_CHECK(!stopping_ || std::this_thread::get_id() == thread_.get_id(),
                 "NvmeStore used from another thread while it is being destroyed");
    submitted_.push_back(std::move(op));
  }
  uint64_t one = 1;
  (void)!::write(wakeup_fd_, &one, sizeof one);  // cannot fail short of a bug: the counter is far from full
}

// ---- The completion thread -------------------------------------------------------------

void NvmeStore::Engine::run() {
  arm_wakeup();
  while (true) {
    take_submitted();
    activate();
    issue();
    int rc = io_uring_submit(&ring_);
    if (rc < 0) fail_everything(system_error("submitting requests to io_uring for " + dir_, -rc));
    if (finished()) return;
    wait_and_reap();
  }
}

// After the destructor asked, once everything submitted has finished (or the store broke),
// including what callbacks submitted since take_submitted().
bool NvmeStore::Engine::finished() {
  if (!stop_seen_ || !waiting_.empty() || (broken_.ok() && !active_.empty())) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  return submitted_.empty();
}

void NvmeStore::Engine::take_submitted() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& op : submitted_) waiting_.push_back(std::move(op));
  submitted_.clear();
  stop_seen_ = stopping_;
}

void NvmeStore::Engine::arm_wakeup() {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  TROUPE_CHECK(sqe != nullptr, "no submission entry for the NVMe store's wakeup");
  io_uring_prep_read(sqe, wakeup_fd_, &wakeup_value_, sizeof wakeup_value_, 0);
  io_uring_sqe_set_data64(sqe, wakeup_tag);
}

// Starts waiting operations in order, once those already active have all their blocks
// issued: the queue stays full across operations, but no more files are open than needed.
void NvmeStore::Engine::activate() {
  while (!waiting_.empty()) {
    NvmeOp& next = *waiting_.front();
    if (!broken_.ok() && next.status.ok())
      next.status = make_error(
          fmt::format("{} {} bytes of {} was refused: the NVMe store in {} has stopped, because {}",
                      next.verb(), next.bytes, next.path, dir_, broken_.error().message));
    bool ready = !next.status.ok();
    if (!ready) {
      if (free_slots_.empty()) return;
      for (const auto& op : active_)
        if (op->issuable()) return;
      if (next.bytes % alignment != 0 && (next.tail_page = tail_pages_->try_acquire()) == nullptr) return;
    }
    active_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    NvmeOp& op = *active_.back();
    op.self = std::prev(active_.end());
    if (op.status.ok()) op.status = op.kind == NvmeOp::Kind::write ? prepare_write(op) : prepare_read(op);
    if (!op.status.ok() || op.index.blocks() == 0) finish(op);
  }
}

Status NvmeStore::Engine::prepare_write(NvmeOp& op) {
  // A write replaces the key: drop its checksums first, so an interrupted write reads as unwritten.
  indices_.erase(op.key);
  std::string index_file = index_path(op.path);
  if (::unlink(index_file.c_str()) != 0 && errno != ENOENT)
    return system_error(
        fmt::format("{} {} bytes of {}: removing its old index {}", op.verb(), op.bytes, op.path, index_file),
        errno);
  op.fd = ::open(op.path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NONBLOCK | (direct_ ? O_DIRECT : 0), 0644);
  if (op.fd < 0) return system_error("opening " + op.path + " for writing", errno);
  struct stat st {};
  TROUPE_TRY(check_regular_file(op.fd, op.path, st));
  uint64_t file_bytes = round_up_to_page(op.bytes);
  uint64_t now = static_cast<uint64_t>(st.st_size);
  // Allocating up front turns a full disk into one clear error before any data moves, and
  // (as fio does) keeps ext4's direct writes from extending the file, which it serialises.
  if (now > file_bytes && ::ftruncate(op.fd, static_cast<off_t>(file_bytes)) != 0)
    return system_error(fmt::format("truncating {} to {} bytes", op.path, file_bytes), errno);
  if (now < file_bytes && ::fallocate(op.fd, 0, 0, static_cast<off_t>(file_bytes)) != 0 &&
      errno != EOPNOTSUPP)
    return system_error(fmt::format("allocating {} bytes for {}", file_bytes, op.path), errno);
  op.index.bytes = op.bytes;
  op.index.block_size = static_cast<uint32_t>(options_.block_size);
  op.index.checksums.assign(op.index.blocks(), 0);
  if (op.tail_page != nullptr) {
    uint64_t tail = op.bytes - op.whole_page_bytes();
    std::memcpy(op.tail_page, op.data + op.whole_page_bytes(), tail);
    std::memset(op.tail_page + tail, 0, alignment - tail);
  }
  return {};
}

Status NvmeStore::Engine::prepare_read(NvmeOp& op) {
  auto known = indices_.find(op.key);
  if (known == indices_.end()) {
    auto loaded = load_index(index_path(op.path));
    if (!loaded) return make_error(fmt::format("reading {}: {}", op.path, loaded.error().message));
    known = indices_.emplace(op.key, std::move(*loaded)).first;
  }
  op.index = known->second;
  if (op.index.bytes != op.bytes)
    return make_error(fmt::format("reading {} bytes of {}, but {} bytes were written there", op.bytes,
                                  op.path, op.index.bytes));
  op.fd = ::open(op.path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | (direct_ ? O_DIRECT : 0));
  if (op.fd < 0) return system_error("opening " + op.path + " for reading", errno);
  struct stat st {};
  TROUPE_TRY(check_regular_file(op.fd, op.path, st));
  uint64_t file_bytes = round_up_to_page(op.bytes);
  if (static_cast<uint64_t>(st.st_size) < file_bytes)
    return make_error(
        fmt::format("{} is truncated: it holds {} bytes, but {} were written there ({} with padding)",
                    op.path, st.st_size, op.bytes, file_bytes));
  return {};
}

// Fills free slots with the next blocks of active operations, oldest first.
void NvmeStore::Engine::issue() {
  for (auto& op : active_) {
    while (op->issuable() && !free_slots_.empty()) {
      unsigned slot = free_slots_.back();
      free_slots_.pop_back();
      issue_block(*op, slot);
    }
    if (free_slots_.empty()) return;
  }
}

void NvmeStore::Engine::issue_block(NvmeOp& op, unsigned slot) {
  uint64_t block = op.next_block++;
  uint64_t begin = op.index.block_offset(block);
  uint64_t end = begin + op.index.block_bytes(block);
  uint64_t pages_end = std::min(end, op.whole_page_bytes());
  NvmeRequest& r = slots_[slot];
  r = NvmeRequest{&op, block, begin, 0, {}, 0, 0};
  if (pages_end > begin) r.iov[r.iov_count++] = {op.data + begin, pages_end - begin};
  if (end > pages_end) r.iov[r.iov_count++] = {op.tail_page, alignment};
  for (int i = 0; i < r.iov_count; ++i) r.left += r.iov[i].iov_len;
  if (op.kind == NvmeOp::Kind::write) op.index.checksums[block] = block_checksum(op, block);
  ++op.in_flight;
  prepare_sqe(slot);
}

void NvmeStore::Engine::prepare_sqe(unsigned slot) {
  NvmeRequest& r = slots_[slot];
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  TROUPE_CHECK(sqe != nullptr, "NVMe store: more requests than submission entries");
  bool write = r.op->kind == NvmeOp::Kind::write;
  int fd = r.op->fd;
  auto offset = static_cast<__u64>(r.offset);
  if (r.iov_count == 1 && write)
    io_uring_prep_write(sqe, fd, r.iov[0].iov_base, static_cast<unsigned>(r.iov[0].iov_len), offset);
  else if (r.iov_count == 1)
    io_uring_prep_read(sqe, fd, r.iov[0].iov_base, static_cast<unsigned>(r.iov[0].iov_len), offset);
  else if (write)
    io_uring_prep_writev(sqe, fd, r.iov.data(), static_cast<unsigned>(r.iov_count), offset);
  else
    io_uring_prep_readv(sqe, fd, r.iov.data(), static_cast<unsigned>(r.iov_count), offset);
  io_uring_sqe_set_data64(sqe, slot);
}

void NvmeStore::Engine::wait_and_reap() {
  auto ms = options_.io_timeout.count();
  __kernel_timespec timeout{ms / 1000, (ms % 1000) * 1000000};
  io_uring_cqe* cqe = nullptr;
  int rc = io_uring_wait_cqe_timeout(&ring_, &cqe, &timeout);
  if (rc == -ETIME || rc == -EINTR) {
    if (rc == -ETIME && in_flight() > 0) {
      auto busy =
          std::find_if(slots_.begin(), slots_.end(), [](const NvmeRequest& r) { return r.op != nullptr; });
      fail_everything(make_error(
          fmt::format("no NVMe request completed within {} ms while {} were in flight (among them {} {} "
                      "bytes at offset {} "
                      "of {}): the device or file system under {} is not answering",
                      ms, in_flight(), busy->op->verb(), busy->left, busy->offset, busy->op->path, dir_)));
    }
    return;
  }
  if (rc < 0) {
    fail_everything(system_error("waiting for io_uring completions in " + dir_, -rc));
    return;
  }
  unsigned head = 0;
  unsigned seen = 0;
  io_uring_for_each_cqe(&ring_, head, cqe) {
    ++seen;
    on_completion(cqe->user_data, cqe->res);
  }
  io_uring_cq_advance(&ring_, seen);
}

void NvmeStore::Engine::on_completion(uint64_t tag, int result) {
  if (tag == wakeup_tag) {
    // The counter is read whatever the result; a failed read is retried by arming it again.
    arm_wakeup();
    return;
  }
  on_request_done(static_cast<unsigned>(tag), result);
}

void NvmeStore::Engine::on_request_done(unsigned slot, int result) {
  NvmeRequest& r = slots_[slot];
  NvmeOp& op = *r.op;
  bool transferred_all = result >= 0 && static_cast<uint64_t>(result) == r.left;
  if (!op.reported && op.status.ok() && !transferred_all) {
    std::string what = fmt::format("{} {} bytes at offset {} of {}", op.verb(), r.left, r.offset, op.path);
    if (result < 0) {
      op.status = system_error(what, -result);
    } else if (op.kind == NvmeOp::Kind::read) {
      op.status =
          make_error(fmt::format("{} returned only {} bytes: the file is shorter than its index says "
                                 "(truncated?)",
                                 what, result));
    } else if (result == 0 || ++r.attempts >= max_attempts) {
      op.status =
          make_error(fmt::format("{} wrote only {} bytes, {} times in a row", what, result, r.attempts));
    } else {
      // A short write (the disk filling up, a signal): resubmit the rest; the next try names the cause.
      auto done = static_cast<uint64_t>(result);
      r.offset += done;
      r.left -= done;
      while (done > 0) {
        iovec& first = r.iov[0];
        std::size_t step = std::min<std::size_t>(done, first.iov_len);
        first.iov_base = static_cast<std::byte*>(first.iov_base) + step;
        first.iov_len -= step;
        done -= step;
        if (first.iov_len == 0) {
          r.iov[0] = r.iov[1];
          --r.iov_count;
        }
      }
      prepare_sqe(slot);
      return;
    }
  }
  if (!op.reported && op.status.ok() && op.kind == NvmeOp::Kind::read) op.status = check_block(op, r.block);
  r.op = nullptr;
  free_slots_.push_back(slot);
  --op.in_flight;
  ++op.blocks_done;
  if (options_.tracer && op.first_block_done_us == 0) op.first_block_done_us = Tracer::now_us();
  if (op.in_flight == 0 && (!op.status.ok() || op.reported || op.blocks_done == op.index.blocks()))
    finish(op);
}

// A read block: verify it and, in the last block, hand the partial page to the caller.
Status NvmeStore::Engine::check_block(NvmeOp& op, uint64_t block) {
  uint32_t got = block_checksum(op, block);
  uint32_t expected = op.index.checksums[block];
  if (got != expected)
    return make_error(
        fmt::format("{} is corrupt: the block at offset {} ({} bytes) has CRC32C {:#010x} where "
                    "{:#010x} was written",
                    op.path, op.index.block_offset(block), op.index.block_bytes(block), got, expected));
  uint64_t end = op.index.block_offset(block) + op.index.block_bytes(block);
  if (end == op.bytes && op.tail_page != nullptr)
    std::memcpy(op.data + op.whole_page_bytes(), op.tail_page, op.bytes - op.whole_page_bytes());
  return {};
}

void NvmeStore::Engine::finish(NvmeOp& op) {
  if (op.status.ok() && !op.reported && op.kind == NvmeOp::Kind::write) {
    op.status = save_index(index_path(op.path), op.index);
    if (op.status.ok()) indices_[op.key] = op.index;
  }
  if (op.fd >= 0) ::close(op.fd);
  if (op.tail_page != nullptr) tail_pages_->release(op.tail_page);
  std::unique_ptr<NvmeOp> owned = std::move(*op.self);
  active_.erase(op.self);
  if (owned->reported) return;
  if (options_.tracer && owned->status.ok() && owned->first_block_done_us != 0)
    options_.tracer->span(
        "nvme", fmt::format("{} {}", owned->kind == NvmeOp::Kind::write ? "write" : "read", owned->key),
        owned->first_block_done_us, Tracer::now_us());
  owned->done(std::move(owned->status));
}

// The store cannot go on (the device stopped answering, io_uring failed): every operation
// fails now with `error`, and every later one too.
void NvmeStore::Engine::fail_everything(const Error& error) {
  broken_ = error;
  for (auto it = active_.begin(); it != active_.end();) {
    NvmeOp& op = **it++;
    if (op.reported) continue;
    op.reported = true;
    op.status = error;  // issues nothing more
    op.done(error);
    if (op.in_flight == 0) finish(op);
  }
  // Waiting operations fail as activate() meets them.
}

}  // namespace troupe
