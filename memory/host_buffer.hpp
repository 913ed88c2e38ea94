// HostBuffer: an owned, 64-byte (or more) aligned block of host memory for tensors and
// transfers (a Buffer placed on the host). Move-only; the bytes are freed when the buffer
// is destroyed.
// Thread safety: like a std::vector — one owner; hand it over, don't share it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "memory/buffer.hpp"
#include "memory/memory_ledger.hpp"

namespace troupe {

class HostBuffer : public Buffer {
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
  ~HostBuffer() override;
  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  /// The bytes stay page-locked while `registration` lives (a cudaHostRegister handle,
  /// let go before the bytes are freed): placement() says pinned_host from here on.
  void hold_page_lock(std::shared_ptr<void> registration);

 private:
  MemoryCharge charge_;
  std::shared_ptr<void> page_lock_;
};

}  // namespace troupe
