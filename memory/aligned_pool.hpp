// AlignedPool: a fixed number of equally sized host buffers, 4 KiB aligned so that
// O_DIRECT I/O can use them, allocated once (one slab) and charged to a MemoryLedger
// for as long as the pool lives — DeepSpeed's swap buffers (buffer_count × buffer_size)
// as a bounded pool. acquire() waits, up to a deadline, when every buffer is out.
//
// Thread safety: every method may be called from any thread.
// Invariants: a buffer is either free or held by exactly one caller; every buffer is
// back when the pool is destroyed (a missing one is a bug: it aborts).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "memory/memory_ledger.hpp"

namespace troupe {

struct AlignedPoolOptions {
  std::size_t buffer_bytes = 0;          ///< rounded up to a multiple of AlignedPool::alignment
  std::size_t count = 0;                 ///< buffers in the pool
  std::shared_ptr<MemoryLedger> ledger;  ///< optional: charged count × rounded buffer_bytes
  MemoryKind kind = MemoryKind::communication;
  std::string name = "aligned pool";  ///< names the pool in errors
};

class AlignedPool {
 public:
  /// The alignment of every buffer: a page, which O_DIRECT accepts on every device.
  static constexpr std::size_t alignment = 4096;
  /// Upper bound on one pool's slab, so that a typo in a size is an error, not an OOM kill.
  static constexpr std::size_t max_total_bytes = std::size_t{1} << 40;

  /// Allocates the slab (not zeroed); fails on a zero size or count, or when memory is short.
  static Result<std::unique_ptr<AlignedPool>> make(AlignedPoolOptions options);
  ~AlignedPool();
  AlignedPool(const AlignedPool&) = delete;
  AlignedPool& operator=(const AlignedPool&) = delete;

  /// Takes a free buffer, waiting up to `timeout` for one; the error names the pool and the wait.
  Result<std::byte*> acquire(std::chrono::milliseconds timeout);
  /// Takes a free buffer if there is one, else returns nullptr.
  std::byte* try_acquire();
  /// Returns a buffer taken from this pool (anything else is a bug).
  void release(std::byte* buffer);

  std::size_t buffer_bytes() const { return buffer_bytes_; }
  std::size_t count() const { return count_; }
  std::size_t available() const;
  /// The one allocation behind every buffer (count × buffer_bytes), e.g. to pin it for DMA.
  std::byte* slab() const { return slab_; }

 private:
  AlignedPool(AlignedPoolOptions options, std::byte* slab, std::size_t buffer_bytes);
  std::byte* take_locked();

  const std::string name_;
  std::byte* const slab_;
  const std::size_t buffer_bytes_;
  const std::size_t count_;
  MemoryCharge charge_;
  mutable std::mutex mutex_;
  std::condition_variable returned_;
  std::vector<std::byte*> free_;  // a stack: the most recently used buffer is reused first
  std::vector<bool> out_;         // by index in the slab
};

}  // namespace troupe
