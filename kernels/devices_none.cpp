#include "kernels/devices.hpp"
#include "kernels/stream_optimizer.hpp"

namespace troupe::kernels {

bool built_with_cuda() {
  return false;
}

Result<int> cuda_device_count() {
  return make_error("this troupe was built without CUDA (no CUDA toolkit was found when it was configured)");
}

}  // namespace troupe::kernels

namespace troupe::kernels::detail {

Status cuda_adam_on_stream(const std::vector<AdamChunkRef>&, const AdamParams&, void*) {
  return make_error("this troupe was built without CUDA: the CUDA Adam kernel is not there");
}

}  // namespace troupe::kernels::detail
