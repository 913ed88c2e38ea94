// Fused multi-tensor Adam/AdamW on the GPU over flat fp32 partitions, optionally writing a
// bf16/fp16 copy of the updated parameters in the same pass. The CPU twin is
// kernels/cpu/optimizer.hpp: the same coefficients (kernels::detail::adam_coefficients,
// LibTorch's double options rounded once) and the same operations in the same order, with
// a fused multiply-add exactly where the CPU's AVX paths have one and nowhere else
// (explicit __fmaf_rn / __fmul_rn / ... intrinsics, so nvcc cannot contract differently).
//
// Thread safety: launches on the caller's stream; the chunks' memory is the caller's until
// the stream has run the step.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/cpu/optimizer.hpp"

namespace troupe::kernels::cuda {

/// Chunks in device memory (kernels::AdamChunk, the CPU kernels' too).
using AdamChunk = kernels::AdamChunk;

/// One step over every chunk (as few launches as the chunk table allows). Returns the
/// launch's error, if any.
cudaError_t adam_step(const AdamChunk* chunks, std::size_t chunk_count, const AdamParams& params,
                      Precision16 copy, cudaStream_t stream);

}  // namespace troupe::kernels::cuda
