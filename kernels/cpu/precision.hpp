// Precision kernels for mixed-precision training on host buffers: fp32 ↔ bf16/fp16 casts
// (round to nearest even, NaN stays NaN) and the overflow check of loss scaling. They are
// the CPU twins of kernels/cuda/precision.cuh, which the GPU tests compare against.
// Thread safety: pure functions on caller-owned memory.
#pragma once

#include <cstddef>

#include "kernels/cpu/optimizer.hpp"
#include "kernels/cpu/reduce.hpp"

namespace troupe::kernels {

/// The element type of a 16-bit copy (none: fp32), and the copy a 16-bit type calls for.
constexpr DataType data_type_of(Precision16 p) {
  return p == Precision16::bf16 ? DataType::bf16 : p == Precision16::f16 ? DataType::f16 : DataType::f32;
}
constexpr Precision16 precision_of(DataType t) {
  return t == DataType::bf16 ? Precision16::bf16 : t == DataType::f16 ? Precision16::f16 : Precision16::none;
}

/// out[i] = x[i] rounded to `to` (bf16 or f16; f32 copies), for i in [0, n).
void cast_from_f32(const float* x, void* out, std::size_t n, DataType to);

/// out[i] = x[i] widened from `from` to fp32 (exact), for i in [0, n).
void cast_to_f32(const void* x, DataType from, float* out, std::size_t n);

/// Whether any x[i] is infinite or NaN: the dynamic loss scaler's overflow test.
bool has_nonfinite(const float* x, std::size_t n);

}  // namespace troupe::kernels
