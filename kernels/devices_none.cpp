#include "kernels/devices.hpp"

namespace troupe::kernels {

bool built_with_cuda() {
  return false;
}

Result<int> cuda_device_count() {
  return make_error("this troupe was built without CUDA (no CUDA toolkit was found when it was configured)");
}

}  // namespace troupe::kernels
