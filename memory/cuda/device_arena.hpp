// DeviceArena: the device tier of a GPU rank. One plain cudaMalloc of `capacity` bytes
// (never managed memory), carved into 256-byte aligned blocks first-fit, freed blocks
// merged with their neighbours; charged to a MemoryLedger as one kind for the arena's
// life. Asking for more than is free is an error naming the arena, the request and what
// is left, never an out-of-memory abort in the middle of a step.
//
// Thread safety: allocate and free from any thread.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "base/result.hpp"
#include "memory/memory_ledger.hpp"

namespace troupe {

class DeviceArena {
 public:
  static constexpr std::size_t alignment = 256;

  /// Allocates `capacity` bytes on `device`; the error carries the CUDA runtime's reason.
  static Result<std::unique_ptr<DeviceArena>> make(std::string name, int device, std::size_t capacity,
                                                   std::shared_ptr<MemoryLedger> ledger = nullptr,
                                                   MemoryKind kind = MemoryKind::parameters);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  /// A block of at least `bytes` (aligned), or an error when no free run is large enough.
  Result<void*> allocate(std::size_t bytes);
  /// Returns a block from allocate (anything else is a bug).
  void free(void* block);

  std::size_t capacity() const { return capacity_; }
  std::size_t free_bytes() const;
  std::size_t largest_free() const;
  int device() const { return device_; }

 private:
  DeviceArena(std::string name, int device, std::size_t capacity, void* base);

  std::string name_;
  int device_ = 0;
  std::size_t capacity_ = 0;
  std::byte* base_ = nullptr;
  MemoryCharge charge_;
  mutable std::mutex mutex_;
  std::map<std::size_t, std::size_t> free_;  // offset -> bytes, merged runs
  std::map<std::size_t, std::size_t> used_;  // offset -> bytes
};

}  // namespace troupe
