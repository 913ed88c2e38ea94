// Element-wise reduction kernels for collectives on host buffers of fp32, bf16 or fp16.
//
// Arithmetic is always fp32: 16-bit inputs are widened, added or scaled in fp32, and
// rounded back to nearest-even once per call. The loops are written for the compiler to
// vectorize and are compiled for AVX-512, AVX2 and a baseline, chosen at run time from
// the CPU's features (function multiversioning). No actors, no allocation.
// Thread safety: pure functions on caller-owned memory.
#pragma once

#include <cstddef>
#include <cstdint>

namespace troupe {

/// Element types the collectives move and reduce.
enum class DataType : uint8_t { f32 = 0, bf16 = 1, f16 = 2 };

constexpr std::size_t element_bytes(DataType t) {
  return t == DataType::f32 ? 4 : 2;
}
const char* data_type_name(DataType t);

}  // namespace troupe

namespace troupe::kernels {

/// dst[i] += src[i] for i in [0, count), in fp32. The ranges must not overlap.
void add_into(void* dst, const void* src, std::size_t count, DataType type);

/// x[i] *= factor for i in [0, count), in fp32.
void scale(void* x, std::size_t count, float factor, DataType type);

/// Σ x[i]² over fp32 values, accumulated in fp64 (the gradient norm: no fp64 copy).
double sum_squares(const float* x, std::size_t count);

/// fp32 ↔ 16-bit conversions, round to nearest even (NaN stays NaN).
uint16_t float_to_bf16(float x);
float bf16_to_float(uint16_t x);
uint16_t float_to_f16(float x);
float f16_to_float(uint16_t x);

/// Typed conveniences for fp32 callers.
inline void add_into(float* dst, const float* src, std::size_t count) {
  add_into(dst, src, count, DataType::f32);
}
inline void scale(float* x, std::size_t count, float factor) {
  scale(x, count, factor, DataType::f32);
}

}  // namespace troupe::kernels
