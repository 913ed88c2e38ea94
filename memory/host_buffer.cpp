#include "memory/host_buffer.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace troupe {

HostBuffer::HostBuffer(std::size_t bytes, std::size_t align) {
  bytes_ = bytes;
  if (bytes == 0) return;
  align = std::max(align, alignment);
  std::size_t rounded = (bytes + align - 1) / align * align;
  data_ = static_cast<std::byte*>(std::aligned_alloc(align, rounded));
  if (data_ == nullptr) throw std::bad_alloc();
  std::memset(data_, 0, rounded);
}

HostBuffer::HostBuffer(std::size_t bytes, std::shared_ptr<MemoryLedger> ledger, MemoryKind kind,
                       std::size_t align)
    : HostBuffer(bytes, align) {
  charge_ = MemoryCharge(std::move(ledger), kind, static_cast<int64_t>(bytes));
}

HostBuffer::~HostBuffer() {
  page_lock_.reset();  // unregistered before the bytes go
  std::free(data_);
}

void HostBuffer::hold_page_lock(std::shared_ptr<void> registration) {
  page_lock_ = std::move(registration);
  placement_ = Placement::pinned_host();
}

HostBuffer::HostBuffer(HostBuffer&& other) noexcept
    : charge_(std::move(other.charge_)), page_lock_(std::move(other.page_lock_)) {
  data_ = std::exchange(other.data_, nullptr);
  bytes_ = std::exchange(other.bytes_, 0);
  placement_ = std::exchange(other.placement_, Placement::host());
}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    page_lock_.reset();
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    placement_ = std::exchange(other.placement_, Placement::host());
    charge_ = std::move(other.charge_);
    page_lock_ = std::move(other.page_lock_);
  }
  return *this;
}

}  // namespace troupe
