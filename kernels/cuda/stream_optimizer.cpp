#include "kernels/stream_optimizer.hpp"

#include <string>

#include "kernels/cuda/optimizer.cuh"

namespace troupe::kernels::detail {

Status cuda_adam_on_stream(const std::vector<AdamChunkRef>& chunks, const AdamParams& params, void* stream) {
  std::vector<cuda::AdamChunk> table;
  table.reserve(chunks.size());
  for (const auto& c : chunks)
    table.push_back(cuda::AdamChunk{c.parameters, c.gradients, c.exp_avg, c.exp_avg_sq, nullptr, c.count});
  cudaError_t e = cuda::adam_step(table.data(), table.size(), params, Precision16::none,
                                  static_cast<cudaStream_t>(stream));
  if (e != cudaSuccess)
    return make_error(std::string("launching the CUDA Adam kernel: ") + cudaGetErrorString(e));
  return {};
}

}  // namespace troupe::kernels::detail
