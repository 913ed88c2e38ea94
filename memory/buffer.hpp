// Buffer: a block of bytes and where they live — host memory, page-locked host memory, or
// the memory of device N. Every buffer the actors hand each other (collectives,
// point-to-point transfers, buckets, partitions, gathered rows, checkpoints) is one, so
// the code that moves bytes takes any memory and reads from the buffer where they are,
// instead of one branch for host pointers and another for device ones. HostBuffer owns
// host bytes; a ViewBuffer lends bytes something else owns (a LibTorch tensor on a GPU, a
// block of the device arena) and keeps that owner alive; the bytes go with the last handle.
// Thread safety: like a std::vector — one owner; hand it over, don't share it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

namespace troupe {

enum class MemorySpace : uint8_t {
  host,         ///< pageable host memory
  pinned_host,  ///< page-locked host memory: copies to and from a device run asynchronously
  device,       ///< the memory of one device
};

/// Where a buffer's bytes live.
struct Placement {
  MemorySpace space = MemorySpace::host;
  int device = -1;  ///< MemorySpace::device: which

  static constexpr Placement host() { return {}; }
  static constexpr Placement pinned_host() { return {MemorySpace::pinned_host, -1}; }
  static constexpr Placement on_device(int device) { return {MemorySpace::device, device}; }
  /// A host thread may read and write the bytes.
  constexpr bool on_host() const { return space != MemorySpace::device; }
  constexpr bool operator==(const Placement& o) const { return space == o.space && device == o.device; }
  constexpr bool operator!=(const Placement& o) const { return !(*this == o); }
};

/// "host", "pinned host" or "device 0", for messages.
std::string describe(Placement placement);

class Buffer {
 public:
  virtual ~Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Placement placement() const { return placement_; }

  template <class T>
  T* as() {
    return reinterpret_cast<T*>(data_);
  }
  template <class T>
  const T* as() const {
    return reinterpret_cast<const T*>(data_);
  }

 protected:
  Buffer() = default;
  Buffer(std::byte* data, std::size_t bytes, Placement placement)
      : data_(data), bytes_(bytes), placement_(placement) {}
  Buffer(Buffer&&) noexcept = default;
  Buffer& operator=(Buffer&&) noexcept = default;

  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
  Placement placement_;
};

/// Bytes another owner holds, at `placement`, alive for as long as `keep` is.
class ViewBuffer : public Buffer {
 public:
  ViewBuffer(void* data, std::size_t bytes, Placement placement, std::shared_ptr<void> keep)
      : Buffer(static_cast<std::byte*>(data), bytes, placement), keep_(std::move(keep)) {}

 private:
  std::shared_ptr<void> keep_;
};

}  // namespace troupe
