// HostBuffer: an owned, 64-byte (or more) aligned block of host memory for tensors and
// transfers. Move-only; the bytes are freed when the buffer is destroyed.
// Thread safety: like a std::vector — one owner; hand it over, don't share it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "memory/memory_ledger.hpp"

namespace troupe {

class HostBuffer {
 public:
  /// Alignment of every HostBuffer: a cache line, enough for AVX-512 loads.
  static constexpr std::size_t alignment = 64;

  HostBuffer() = default;
  /// Allocates `bytes` zero-filled bytes (0 is allowed and allocates nothing).
  explicit HostBuffer(std::size_t bytes, std::size_t align = alignment);
  /// The same, charged to `ledger` as `kind` for as long as the buffer lives; `align` (a
  /// power of two, at least `alignment`) is 4096 for buffers that O_DIRECT reads land in.
  HostBuffer(std::size_t bytes, std::shared_ptr<MemoryLedger> ledger, MemoryKind kind,
             std::size_t align = alignment);
  ~HostBuffer();
  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

  template <class T>
  T* as() {
    return reinterpret_cast<T*>(data_);
  }
  template <class T>
  const T* as() const {
    return reinterpret_cast<const T*>(data_);
  }

 private:
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
  MemoryCharge charge_;
};

}  // namespace troupe
