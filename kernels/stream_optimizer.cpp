#include "kernels/stream_optimizer.hpp"

namespace troupe::kernels {

Status adam_on_stream(const std::vector<AdamChunkRef>& chunks, const AdamParams& params, void* stream) {
  if (stream) return detail::cuda_adam_on_stream(chunks, params, stream);
  for (const auto& c : chunks) adam_step(c.parameters, c.gradients, c.exp_avg, c.exp_avg_sq, c.count, params);
  return {};
}

}  // namespace troupe::kernels
