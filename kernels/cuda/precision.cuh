// Precision kernels on device buffers for mixed precision and clipping: fp32 ↔ bf16/fp16
// casts, the overflow flag of loss scaling, and the squared L2 norm. CPU twins:
// kernels/cpu/precision.hpp (casts, overflow) and kernels/cpu/reduce.hpp (sum_squares).
// Thread safety: launches on the caller's stream; buffers are the caller's until it ran.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/cpu/reduce.hpp"

namespace troupe::kernels::cuda {

/// out[i] = x[i] rounded to `to` (nearest even; NaN stays NaN), i in [0, n).
cudaError_t cast_from_f32(const float* x, void* out, std::size_t n, DataType to, cudaStream_t stream);

/// out[i] = x[i] widened from `from` to fp32, i in [0, n).
cudaError_t cast_to_f32(const void* x, DataType from, float* out, std::size_t n, cudaStream_t stream);

/// Sets *flag (device memory) to 1 when any x[i] is infinite or NaN; never clears it, so
/// one flag can collect several buffers before the host reads it once.
cudaError_t flag_nonfinite(const float* x, std::size_t n, int* flag, cudaStream_t stream);

/// Device doubles sum_squares needs for `n` elements as workspace.
std::size_t sum_squares_workspace(std::size_t n);

/// *out (device) = Σ x[i]², accumulated in fp64 in a fixed order (the same result on every
/// run), through `workspace` (sum_squares_workspace(n) doubles of device memory).
cudaError_t sum_squares(const float* x, std::size_t n, double* workspace, double* out, cudaStream_t stream);

}  // namespace troupe::kernels::cuda
