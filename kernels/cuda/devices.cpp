#include "kernels/devices.hpp"

#include <cuda_runtime_api.h>

#include <string>

namespace troupe::kernels {

bool built_with_cuda() {
  return true;
}

Result<int> cuda_device_count() {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess)
    return make_error(std::string("the CUDA runtime finds no usable device: ") + cudaGetErrorString(e));
  return count;
}

Result<DeviceMemory> cuda_memory(int device) {
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess)
    return make_error("GPU " + std::to_string(device) + ": " + cudaGetErrorString(e));
  std::size_t free = 0, total = 0;
  if (cudaError_t e = cudaMemGetInfo(&free, &total); e != cudaSuccess)
    return make_error("GPU " + std::to_string(device) + ": " + cudaGetErrorString(e));
  return DeviceMemory{static_cast<int64_t>(free), static_cast<int64_t>(total)};
}

}  // namespace troupe::kernels
