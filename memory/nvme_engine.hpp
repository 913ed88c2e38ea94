// NvmeStore's engine (internal to the NVMe tier): the io_uring ring, the request slots
// and the completion thread that owns both. Operations arrive through a locked queue
// and an eventfd whose read is always armed in the ring, so the thread sleeps in one
// place — io_uring_wait_cqe_timeout — for both new work and completions.
//
// Thread safety: submit() from any thread; everything else runs on the completion thread.
// Shutdown: the destructor waits for run() to return, then joins the thread — unless the
// store broke with requests the kernel never completed: a thread with io_uring requests
// stuck in io-wq cannot exit until they end (the kernel waits for its io-wq workers), so
// it is detached instead, and the destructor returns.
// Invariants: at most queue_depth requests (plus the eventfd read) in flight, so the
// submission queue never runs out of entries and the completion queue never overflows;
// an operation is active from its first request until its callback, and only then does
// it give back its file descriptor and bounce page.
#pragma once

#include <liburing.h>
#include <sys/uio.h>

#include <array>
#include <condition_variable>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "memory/aligned_pool.hpp"
#include "memory/nvme_index.hpp"
#include "memory/nvme_store.hpp"

namespace troupe {

/// One write or read of a whole key.
struct NvmeOp {
  enum class Kind { write, read };
  Kind kind = Kind::write;
  std::string key;
  std::string path;
  std::byte* data = nullptr;
  uint64_t bytes = 0;
  IoCallback done;
  Status status;  // the first error, or a validation error set before submission

  // Completion thread only, once active.
  int fd = -1;
  KeyIndex index;
  std::byte* tail_page = nullptr;  // holds the last partial page, when bytes is not whole pages
  uint64_t next_block = 0;
  uint64_t blocks_done = 0;
  unsigned in_flight = 0;
  int64_t first_block_done_us = 0;  // traced stores only
  bool reported = false;            // the callback ran early (the store broke); late completions are ignored
  std::list<std::unique_ptr<NvmeOp>>::iterator self;

  const char* verb() const { return kind == Kind::write ? "writing" : "reading"; }
  uint64_t whole_page_bytes() const { return bytes / NvmeStore::alignment * NvmeStore::alignment; }
  bool issuable() const { return status.ok() && next_block < index.blocks(); }
};

/// One block's transfer: a slot of the queue.
struct NvmeRequest {
  NvmeOp* op = nullptr;
  uint64_t block = 0;
  uint64_t offset = 0;  // in the file, of what is left to transfer
  uint64_t left = 0;    // bytes left to transfer
  std::array<iovec, 2> iov{};
  int iov_count = 0;
  unsigned attempts = 0;
};

class NvmeStore::Engine {
 public:
  static Result<std::unique_ptr<Engine>> make(std::string dir, NvmeStoreOptions options, bool direct);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  void submit(std::unique_ptr<NvmeOp> op);
  std::string path_of(const std::string& key) const { return dir_ + "/" + key; }

  const std::string dir_;
  const NvmeStoreOptions options_;
  const bool direct_;

 private:
  Engine(std::string dir, NvmeStoreOptions options, bool direct);
  void run();
  bool finished();
  void take_submitted();
  void arm_wakeup();
  void activate();
  Status prepare_write(NvmeOp& op);
  Status prepare_read(NvmeOp& op);
  void issue();
  void issue_block(NvmeOp& op, unsigned slot);
  void prepare_sqe(unsigned slot);
  void wait_and_reap();
  void on_completion(uint64_t tag, int result);
  void on_request_done(unsigned slot, int result);
  Status check_block(NvmeOp& op, uint64_t block);
  void finish(NvmeOp& op);
  void fail_everything(const Error& error);
  unsigned in_flight() const { return options_.queue_depth - static_cast<unsigned>(free_slots_.size()); }

  // Shared with submitters and the destructor, under mutex_.
  std::mutex mutex_;
  std::deque<std::unique_ptr<NvmeOp>> submitted_;
  bool stopping_ = false;
  bool returned_ = false;  // run() has returned: the thread touches nothing of the engine any more
  std::condition_variable returned_cv_;

  // Completion thread only (and construction/destruction).
  io_uring ring_{};
  bool ring_ready_ = false;
  int wakeup_fd_ = -1;
  uint64_t wakeup_value_ = 0;
  std::unique_ptr<AlignedPool> tail_pages_;
  std::vector<NvmeRequest> slots_;
  std::vector<unsigned> free_slots_;
  std::deque<std::unique_ptr<NvmeOp>> waiting_;
  std::list<std::unique_ptr<NvmeOp>> active_;
  std::unordered_map<std::string, KeyIndex> indices_;
  Status broken_;
  bool stop_seen_ = false;
  std::thread thread_;
};

}  // namespace troupe
