// Kernels of a GPU rank's partition, on a stream: troupe's CUDA kernels launched on a CUDA
// stream when there is one, their CPU twins at once on host memory when the stream is null.
// Both give the same result (the CUDA kernels' tests hold them to the twins). No CUDA types
// here, so the actors that own a partition can call them in any build.
//
//   adam_on_stream        fused Adam/AdamW over chunks (kernels/cuda/optimizer.cuh)
//   square_sum_on_stream  Σ x² in fp64, in a fixed order (kernels/cuda/precision.cuh)
//
// Thread safety: the memory is the caller's until the stream has run the kernel.
#pragma once

#include <cstddef>
#include <vector>

#include "base/result.hpp"
#include "kernels/cpu/optimizer.hpp"

namespace troupe::kernels {

/// One step over every chunk (no 16-bit copy: copy_out is not used); `stream` is a
/// cudaStream_t or null (host memory, now).
Status adam_on_stream(const std::vector<AdamChunk>& chunks, const AdamParams& params, void* stream);

/// Doubles of workspace square_sum_on_stream needs for `n` elements on `stream` (0 on a host).
std::size_t square_sum_workspace(std::size_t n, void* stream);
/// *out = Σ x[i]² over `n` elements, in fp64; on a CUDA stream `workspace` and `out` are
/// device memory and the sum is there once the stream has run it.
Status square_sum_on_stream(const float* x, std::size_t n, double* workspace, double* out, void* stream);

namespace detail {
/// The CUDA launches (kernels/cuda/stream_kernels.cpp), or errors in a build without CUDA.
Status cuda_adam_on_stream(const std::vector<AdamChunk>& chunks, const AdamParams& params, void* stream);
std::size_t cuda_square_sum_workspace(std::size_t n);
Status cuda_square_sum_on_stream(const float* x, std::size_t n, double* workspace, double* out, void* stream);
}  // namespace detail

}  // namespace troupe::kernels
