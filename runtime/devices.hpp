// Which device a rank computes on ([cluster] device), checked when the engine starts:
// "cuda" needs a build with CUDA and one visible GPU per rank on the host, the rank's GPU
// being its local rank (the torchrun and DeepSpeed convention), or, with [cluster]
// share_gpus, any GPU at all: local rank modulo the count.
#pragma once

#include <cstdint>
#include <string>

#include "base/result.hpp"

namespace troupe {

/// Whether `local_world_size` ranks, of which this is `local_rank`, can each have a GPU of
/// their own given `devices` (the CUDA runtime's count, or why there is none), or, when
/// they `share`, one at all. The error names the key, what was found and what to do.
Status check_cuda_devices(const Result<int>& devices, int64_t local_rank, int64_t local_world_size,
                          bool share = false);

/// check_cuda_devices with this process's CUDA runtime.
Status check_cuda_devices(int64_t local_rank, int64_t local_world_size, bool share = false);

/// The GPU of local rank `local_rank` among `devices`: its own, or shared round-robin.
inline int gpu_of(int64_t local_rank, int devices) {
  return devices > 0 ? static_cast<int>(local_rank % devices) : 0;
}

}  // namespace troupe
