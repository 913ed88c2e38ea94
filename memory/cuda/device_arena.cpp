#include "memory/cuda/device_arena.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>

#include <fmt/format.h>

#include "base/check.hpp"

namespace troupe {

Result<std::unique_ptr<DeviceArena>> DeviceArena::make(std::string name, int device, std::size_t capacity,
                                                       std::shared_ptr<MemoryLedger> ledger,
                                                       MemoryKind kind) {
  if (capacity == 0) return make_error(fmt::format("device arena {}: a capacity of 0 bytes", name));
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess)
    return make_error(
        fmt::format("device arena {}: selecting GPU {} failed: {}", name, device, cudaGetErrorString(e)));
  capacity = (capacity + alignment - 1) / alignment * alignment;
  void* base = nullptr;
  if (cudaError_t e = cudaMalloc(&base, capacity); e != cudaSuccess)
    return make_error(fmt::format("device arena {}: allocating {} bytes on GPU {} failed: {}", name, capacity,
                                  device, cudaGetErrorString(e)));
  std::unique_ptr<DeviceArena> arena(new DeviceArena(std::move(name), device, capacity, base));
  arena->charge_ = MemoryCharge(std::move(ledger), kind, static_cast<int64_t>(capacity));
  return arena;
}

DeviceArena::DeviceArena(std::string name, int device, std::size_t capacity, void* base)
    : name_(std::move(name)), device_(device), capacity_(capacity), base_(static_cast<std::byte*>(base)) {
  free_[0] = capacity;
}

DeviceArena::~DeviceArena() {
  TROUPE_CHECK(used_.empty(), "every block of a device arena is freed before it");
  cudaSetDevice(device_);
  cudaFree(base_);
}

Result<void*> DeviceArena::allocate(std::size_t bytes) {
  std::size_t size = std::max<std::size_t>((bytes + alignment - 1) / alignment * alignment, alignment);
  std::lock_guard lock(mutex_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < size) continue;
    std::size_t offset = it->first, left = it->second - size;
    free_.erase(it);
    if (left > 0) free_[offset + size] = left;
    used_[offset] = size;
    return static_cast<void*>(base_ + offset);
  }
  std::size_t total = 0, largest = 0;
  for (const auto& [offset, run] : free_) {
    total += run;
    largest = std::max(largest, run);
  }
  return make_error(
      fmt::format("device arena {} on GPU {}: no free run of {} bytes ({} of {} bytes free, the "
                  "largest run {})",
                  name_, device_, size, total, capacity_, largest));
}

void DeviceArena::free(void* block) {
  auto offset = static_cast<std::size_t>(static_cast<std::byte*>(block) - base_);
  std::lock_guard lock(mutex_);
  auto used = used_.find(offset);
  TROUPE_CHECK(used != used_.end(), "a block freed to a device arena came from it");
  std::size_t size = used->second;
  used_.erase(used);
  auto [it, inserted] = free_.emplace(offset, size);
  TROUPE_CHECK(inserted, "a block is freed once");
  if (auto next = std::next(it); next != free_.end() && it->first + it->second == next->first) {
    it->second += next->second;
    free_.erase(next);
  }
  if (it != free_.begin())
    if (auto prev = std::prev(it); prev->first + prev->second == it->first) {
      prev->second += it->second;
      free_.erase(it);
    }
}

std::size_t DeviceArena::free_bytes() const {
  std::lock_guard lock(mutex_);
  std::size_t total = 0;
  for (const auto& [offset, run] : free_) total += run;
  return total;
}

std::size_t DeviceArena::largest_free() const {
  std::lock_guard lock(mutex_);
  std::size_t largest = 0;
  for (const auto& [offset, run] : free_) largest = std::max(largest, run);
  return largest;
}

}  // namespace troupe
