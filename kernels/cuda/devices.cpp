#include "kernels/devices.hpp"

#include <cuda_runtime_api.h>

#include <string>

namespace troupe::kernels {

bool built_with_cuda() {
  return true;
}

namespace {

// "12.4" from CUDA's 12040.
std::string cuda_version(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

}  // namespace

Result<int> cuda_device_count() {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaErrorInsufficientDriver) {  // both versions, so the user knows what to update
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    if (driver == 0)
      return make_error("no NVIDIA driver is loaded on this machine (the CUDA runtime " +
                        cuda_version(runtime) + " needs one)");
    return make_error(
        "the NVIDIA driver is older than this troupe's CUDA runtime: the driver runs CUDA up to " +
        cuda_version(driver) + ", troupe was built with " + cuda_version(runtime) + "; update the driver");
  }
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
