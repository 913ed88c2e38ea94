// The CUDA devices this process can use, asked of the CUDA runtime when troupe is built
// with CUDA (kernels/cuda/devices.cpp) and an error saying so when it is not
// (kernels/devices_none.cpp). No CUDA types here, so any layer may include it.
#pragma once

#include <cstdint>

#include "base/result.hpp"

namespace troupe::kernels {

/// Whether this build has the CUDA backend.
bool built_with_cuda();

/// The number of CUDA devices visible to this process (after CUDA_VISIBLE_DEVICES), or an
/// error with the runtime's reason (no driver, a driver too old, no CUDA in this build).
Result<int> cuda_device_count();

/// Device `device`'s memory as the CUDA runtime reports it (cudaMemGetInfo).
struct DeviceMemory {
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;
};
Result<DeviceMemory> cuda_memory(int device);

}  // namespace troupe::kernels
