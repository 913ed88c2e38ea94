#include "memory/aligned_pool.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

namespace troupe {

Result<std::unique_ptr<AlignedPool>> AlignedPool::make(AlignedPoolOptions options) {
  if (options.buffer_bytes == 0 || options.count == 0)
    return make_error(fmt::format("{}: buffers of {} bytes, {} of them: both must be positive", options.name,
                                  options.buffer_bytes, options.count));
  std::size_t rounded = (options.buffer_bytes + alignment - 1) / alignment * alignment;
  if (rounded > max_total_bytes / options.count)
    return make_error(fmt::format("{}: {} buffers of {} bytes exceed the {} bytes one pool may hold",
                                  options.name, options.count, rounded, max_total_bytes));
  void* slab = nullptr;
  int rc = posix_memalign(&slab, alignment, rounded * options.count);
  if (rc != 0)
    return make_error(fmt::format("{}: allocating {} buffers of {} bytes failed: {}", options.name,
                                  options.count, rounded, std::strerror(rc)));
  return std::unique_ptr<AlignedPool>(
      new AlignedPool(std::move(options), static_cast<std::byte*>(slab), rounded));
}

AlignedPool::AlignedPool(AlignedPoolOptions options, std::byte* slab, std::size_t buffer_bytes)
    : name_(std::move(options.name)),
      slab_(slab),
      buffer_bytes_(buffer_bytes),
      count_(options.count),
      charge_(std::move(options.ledger), options.kind, static_cast<int64_t>(buffer_bytes * options.count)),
      out_(options.count, false) {
  free_.reserve(count_);
  for (std::size_t i = count_; i > 0; --i) free_.push_back(slab_ + (i - 1) * buffer_bytes_);
}

AlignedPool::~AlignedPool() {
  TROUPE_CHECK(free_.size() == count_, "an AlignedPool is destroyed while some of its buffers are out");
  std::free(slab_);
}

std::byte* AlignedPool::take_locked() {
  if (free_.empty()) return nullptr;
  std::byte* b = free_.back();
  free_.pop_back();
  out_[static_cast<std::size_t>(b - slab_) / buffer_bytes_] = true;
  return b;
}

Result<std::byte*> AlignedPool::acquire(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!returned_.wait_for(lock, timeout, [&] { return !free_.empty(); }))
    return make_error(
        fmt::format("waited {} ms for a buffer of the {}: all {} of {} bytes are in use "
                    "(raise its buffer count or release buffers sooner)",
                    timeout.count(), name_, count_, buffer_bytes_));
  return take_locked();
}

std::byte* AlignedPool::try_acquire() {
  std::lock_guard<std::mutex> lock(mutex_);
  return take_locked();
}

void AlignedPool::release(std::byte* buffer) {
  TROUPE_CHECK(buffer >= slab_ && buffer < slab_ + buffer_bytes_ * count_ &&
                   static_cast<std::size_t>(buffer - slab_) % buffer_bytes_ == 0,
               "AlignedPool::release of a buffer that is not from this pool");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::size_t i = static_cast<std::size_t>(buffer - slab_) / buffer_bytes_;
    TROUPE_CHECK(out_[i], "AlignedPool::release of a buffer that is already free");
    out_[i] = false;
    free_.push_back(buffer);
  }
  returned_.notify_one();
}

std::size_t AlignedPool::available() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return free_.size();
}

}  // namespace troupe
