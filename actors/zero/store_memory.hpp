// StoreMemory: where a stage's ZeRO buffers live (the flat parameters and gradients, the
// partitions, the bucket slots, the gathered rows), and what the store, bucket pool,
// fetcher and shard owner do with them whatever the memory: allocate a Buffer, see its
// values as a LibTorch tensor, zero it. Host memory: HostBuffers, read by troupe's CPU
// kernels. A rank's device (a GPU, or the CPU standing in for one): each buffer is a
// LibTorch tensor's bytes on that device, lent as a ViewBuffer placed in the device's
// memory, so the collectives move it through the device's path; it is allocated, viewed
// and zeroed on the calling thread's current stream (the compute or optimizer stream that
// issues the work), never with a synchronous host copy.
// Thread safety: immutable; any thread (tensors go to that thread's current stream).
#pragma once

#include <torch/types.h>

#include <cstddef>
#include <memory>

#include "kernels/cpu/reduce.hpp"
#include "memory/buffer.hpp"
#include "memory/host_buffer.hpp"
#include "memory/memory_ledger.hpp"

namespace troupe {

class StoreMemory {
 public:
  /// Host memory.
  StoreMemory() = default;
  /// The memory of the device LibTorch calls `device`, which buffers name `placement`.
  StoreMemory(Placement placement, torch::Device device);

  bool on_device() const { return !placement_.on_host(); }
  Placement placement() const { return placement_; }
  /// Where tensors over the buffers are (kCPU for host memory and for a CPU standing in).
  torch::Device device() const { return device_; }

  /// `bytes` zeroed bytes, charged to `ledger` as `kind` while the buffer lives; `align`
  /// (host memory only) as HostBuffer takes it.
  std::shared_ptr<Buffer> allocate(std::size_t bytes, const std::shared_ptr<MemoryLedger>& ledger,
                                   MemoryKind kind, std::size_t align = HostBuffer::alignment) const;
  /// A tensor of `sizes` over the values of `type` from `offset` (in values) of `buffer`
  /// (of this memory, or the host's), which it keeps alive.
  torch::Tensor view(const std::shared_ptr<Buffer>& buffer, std::size_t offset, at::IntArrayRef sizes,
                     DataType type) const;
  /// Zeroes the first `bytes` of `buffer`.
  void zero(Buffer& buffer, std::size_t bytes) const;

 private:
  Placement placement_ = Placement::host();
  torch::Device device_ = torch::kCPU;
};

}  // namespace troupe
