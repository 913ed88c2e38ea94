#include "kernels/devices.hpp"
#include "kernels/stream_kernels.hpp"

namespace troupe::kernels {

bool built_with_cuda() {
  return false;
}

Result<int> cuda_device_count() {
  return make_error("this troupe was built without CUDA (no CUDA toolkit was found when it was configured)");
}

Result<DeviceMemory> cuda_memory(int) {
  return make_error("this troupe was built without CUDA (no CUDA toolkit was found when it was configured)");
}

}  // namespace troupe::kernels

namespace troupe::kernels::detail {

Status cuda_adam_on_stream(const std::vector<AdamChunk>&, const AdamParams&, void*) {
  return make_error("this troupe was built without CUDA: the CUDA Adam kernel is not there");
}

std::size_t cuda_square_sum_workspace(std::size_t) {
  return 0;
}

Status cuda_square_sum_on_stream(const float*, std::size_t, double*, double*, void*) {
  return make_error("this troupe was built without CUDA: the CUDA squared-norm kernel is not there");
}

}  // namespace troupe::kernels::detail
