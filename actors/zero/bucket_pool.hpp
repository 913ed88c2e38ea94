// BucketPool: the buffers gradients pass through on their way to a reduce-scatter in
// ZeRO stages 2 and 3, where no full gradient buffer exists. A row's gradients are
// copied into a slot as autograd produces them; the slot is reduced, this rank's
// block absorbed into the partition, and the slot freed for the next row.
//
// With overlap_comm there are two shared slots, so one fills while the other reduces
// and backward goes on; without, one, and posting a row waits until it is reduced
// (DeepSpeed's reduction in the compute stream), which measures what overlap buys. A row may have a dedicated
// slot (stage 3's persistent row, whose gradients arrive all through backward). Acquiring waits while a slot
// is being reduced; if every shared slot is still filling (rows whose gradients interleave) the pool grows
// instead, since waiting could never end. The slots are in the store's memory (a GPU rank's: the
// device's, zeroed on the compute stream). Thread safety: acquire on the compute thread; release and fail
// from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "actors/zero/store_memory.hpp"
#include "base/trace.hpp"

namespace troupe {

class BucketPool {
 public:
  /// Waits show on the trace's "compute wait" track.
  /// Slots hold `slot_elements` values of `element_bytes` each (the gradients' type), in `memory`.
  BucketPool(bool overlap, std::size_t slot_elements, std::shared_ptr<MemoryLedger> ledger, double timeout_s,
             Tracer* tracer = nullptr, std::size_t element_bytes = sizeof(float), StoreMemory memory = {});
  /// A slot of `elements` only `row` uses; returns its index.
  std::size_t add_dedicated(std::size_t row, std::size_t elements);

  /// A zeroed slot for `row`'s gradients (its dedicated one if it has one). Throws
  /// std::runtime_error after the timeout or once the pool has failed.
  std::size_t acquire(std::size_t row, std::size_t elements);
  /// The slot's row is about to be posted for reduction.
  void reducing(std::size_t slot);
  /// After posting `slot`'s row: without overlap, waits until it was reduced and
  /// absorbed (throws as acquire does); with overlap, returns at once.
  void posted(std::size_t slot);
  /// The slot's contents were absorbed: it may be filled again.
  void release(std::size_t slot);
  /// Between steps (every slot free): drops the slots the pool grew beyond its shared
  /// ones, so a step whose gradients interleaved does not keep its extra memory.
  void trim();
  /// Wakes every waiter with `error`.
  void fail(const std::string& error);

  std::shared_ptr<Buffer> buffer(std::size_t slot);

 private:
  enum class State { free, filling, reducing };
  struct Slot {
    std::shared_ptr<Buffer> buffer;
    State state = State::free;
    std::optional<std::size_t> dedicated_row;
    int64_t posting_since_us = 0;  // without overlap: when reducing() was called
  };
  std::shared_ptr<Buffer> make_slot(std::size_t elements) const;
  std::optional<std::size_t> find_free(std::size_t row) const;
  bool can_grow() const;
  /// Waits for release() or fail(); throws once the deadline passes.
  void wait_for_change(std::unique_lock<std::mutex>& lock, std::chrono::steady_clock::time_point deadline);

  bool overlap_;
  std::size_t shared_slots_;
  std::size_t slot_elements_;
  std::size_t element_bytes_;
  std::shared_ptr<MemoryLedger> ledger_;
  double timeout_s_;
  Tracer* tracer_;
  StoreMemory memory_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Slot> slots_;
  std::string error_;
};

}  // namespace troupe
