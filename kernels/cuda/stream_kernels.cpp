#include "kernels/stream_kernels.hpp"

#include <string>

#include "kernels/cuda/optimizer.cuh"
#include "kernels/cuda/precision.cuh"

namespace troupe::kernels::detail {

Status cuda_adam_on_stream(const std::vector<AdamChunk>& chunks, const AdamParams& params, void* stream) {
  cudaError_t e = cuda::adam_step(chunks.data(), chunks.size(), params, Precision16::none,
                                  static_cast<cudaStream_t>(stream));
  if (e != cudaSuccess)
    return make_error(std::string("launching the CUDA Adam kernel: ") + cudaGetErrorString(e));
  return {};
}

std::size_t cuda_square_sum_workspace(std::size_t n) {
  return cuda::sum_squares_workspace(n);
}

Status cuda_square_sum_on_stream(const float* x, std::size_t n, double* workspace, double* out,
                                 void* stream) {
  cudaError_t e = cuda::sum_squares(x, n, workspace, out, static_cast<cudaStream_t>(stream));
  if (e != cudaSuccess)
    return make_error(std::string("launching the CUDA squared-norm kernel: ") + cudaGetErrorString(e));
  return {};
}

}  // namespace troupe::kernels::detail
