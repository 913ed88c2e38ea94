// Fused Adam/AdamW over chunks of a partition on a stream: troupe's CUDA kernel
// (kernels/cuda/optimizer.cuh) launched on a CUDA stream when there is one, the CPU twin
// (kernels/cpu/optimizer.hpp) at once on host memory when the stream is null. Both give
// the same result (the CUDA kernel's tests hold it to the twin). No CUDA types here, so
// the actors that own a partition can call it in any build.
// Thread safety: the chunks' memory is the caller's until the stream has run the step.
#pragma once

#include <cstddef>
#include <vector>

#include "base/result.hpp"
#include "kernels/cpu/optimizer.hpp"

namespace troupe::kernels {

struct AdamChunkRef {
  float* parameters = nullptr;
  const float* gradients = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  std::size_t count = 0;
};

/// One step over every chunk; `stream` is a cudaStream_t or null (host memory, now).
Status adam_on_stream(const std::vector<AdamChunkRef>& chunks, const AdamParams& params, void* stream);

namespace detail {
/// The CUDA launch (kernels/cuda/stream_optimizer.cpp), or an error in a build without CUDA.
Status cuda_adam_on_stream(const std::vector<AdamChunkRef>& chunks, const AdamParams& params, void* stream);
}  // namespace detail

}  // namespace troupe::kernels
