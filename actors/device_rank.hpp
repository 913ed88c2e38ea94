// DeviceRank: what the actors of a rank on the device path share (a GPU rank, or its
// stand-in of CPU streams: runtime/stand_in_device.hpp) — the device its model lives on,
// the compute stream they issue work to, and the actor that runs collectives on device
// memory. The stage and its shard owner each issue on `stream` from a host thread of
// their own (an IssuingStream), inside `scope`: on a GPU, a TorchStreamGuard making
// `stream` LibTorch's current stream, so LibTorch's kernels land on it.
#pragma once

#include <torch/types.h>
#include <caf/actor.hpp>

#include <functional>
#include <memory>

#include "actors/issuing_stream.hpp"
#include "base/result.hpp"
#include "memory/buffer.hpp"

namespace troupe {

struct DeviceRank {
  torch::Device device = torch::kCPU;
  /// Where its memory is, as buffers say (Buffer::placement): device N of a GPU; a CPU
  /// stream standing in for a device (the device path run on the CPU) calls its memory
  /// device 0 too, so spans in it take the device's path (the device collectives).
  Placement memory = Placement::on_device(0);
  std::shared_ptr<Stream> stream;    ///< the rank's compute stream (a CudaStream, or a CpuStream standing in)
  std::shared_ptr<Stream> d2h, h2d;  ///< its copy streams (the host mirror of [offload])
  IssuingStream::Scope scope;
  caf::actor collectives;  ///< the comm agent's requests on device spans (NCCL or staged)
  /// Page-locks host memory until the handle goes (cudaHostRegister), so copies to and
  /// from it run asynchronously at full rate; null: host memory stays pageable.
  std::function<Result<std::shared_ptr<void>>(void* data, std::size_t bytes)> pin;
};

}  // namespace troupe
