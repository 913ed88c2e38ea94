#include "kernels/stream_kernels.hpp"

#include "kernels/cpu/reduce.hpp"

namespace troupe::kernels {

Status adam_on_stream(const std::vector<AdamChunk>& chunks, const AdamParams& params, void* stream) {
  if (stream) return detail::cuda_adam_on_stream(chunks, params, stream);
  for (const auto& c : chunks) adam_step(c.parameters, c.gradients, c.exp_avg, c.exp_avg_sq, c.count, params);
  return {};
}

std::size_t square_sum_workspace(std::size_t n, void* stream) {
  return stream ? detail::cuda_square_sum_workspace(n) : 0;
}

Status square_sum_on_stream(const float* x, std::size_t n, double* workspace, double* out, void* stream) {
  if (stream) return detail::cuda_square_sum_on_stream(x, n, workspace, out, stream);
  *out = sum_squares(x, n);
  return {};
}

}  // namespace troupe::kernels
