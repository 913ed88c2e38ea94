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

}  // namespace troupe::kernels
