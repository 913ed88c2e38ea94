#include "kernels/cpu/reduce.hpp"

#include "kernels/bf16_bits.hpp"

namespace troupe {

const char* data_type_name(DataType t) {
  switch (t) {
    case DataType::f32:
      return "fp32";
    case DataType::bf16:
      return "bf16";
    case DataType::f16:
      return "fp16";
  }
  return "?";
}

}  // namespace troupe

namespace troupe::kernels {
namespace {

// GCC's ThreadSanitizer instruments the clones' resolver, which the dynamic loader runs
// before TSan's runtime is up (a crash at startup): under TSan, the default path only.
#if defined(__SANITIZE_THREAD__)
#define TROUPE_MULTIVERSION
#else
#define TROUPE_MULTIVERSION __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

// IEEE half precision by bit manipulation (no F16C needed, so every build can run it).
inline float widen_f16(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return float_of_bits(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  if (exponent == 0) {  // zero or subnormal: mantissa × 2^-24
    float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  return float_of_bits(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

inline uint16_t narrow_f16(float x) {
  uint32_t u = bits_of_float(x);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow → inf
  if (magnitude < 0x38800000u) {                                               // subnormal or zero
    // Scale so the subnormal's integer mantissa sits in the low bits, rounding to even.
    float scaled = float_of_bits(magnitude) * 16777216.0f;  // × 2^24
    uint32_t m = static_cast<uint32_t>(scaled);
    float rest = scaled - static_cast<float>(m);
    if (rest > 0.5f || (rest == 0.5f && (m & 1u))) ++m;
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

TROUPE_MULTIVERSION void add_f32(float* __restrict dst, const float* __restrict src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
}
TROUPE_MULTIVERSION void add_bf16(uint16_t* __restrict dst, const uint16_t* __restrict src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = narrow_bf16(widen_bf16(dst[i]) + widen_bf16(src[i]));
}
TROUPE_MULTIVERSION void add_f16(uint16_t* __restrict dst, const uint16_t* __restrict src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = narrow_f16(widen_f16(dst[i]) + widen_f16(src[i]));
}
TROUPE_MULTIVERSION void scale_f32(float* x, std::size_t n, float factor) {
  for (std::size_t i = 0; i < n; ++i) x[i] *= factor;
}
TROUPE_MULTIVERSION void scale_bf16(uint16_t* x, std::size_t n, float factor) {
  for (std::size_t i = 0; i < n; ++i) x[i] = narrow_bf16(widen_bf16(x[i]) * factor);
}
TROUPE_MULTIVERSION void scale_f16(uint16_t* x, std::size_t n, float factor) {
  for (std::size_t i = 0; i < n; ++i) x[i] = narrow_f16(widen_f16(x[i]) * factor);
}

}  // namespace

uint16_t float_to_bf16(float x) {
  return narrow_bf16(x);
}
float bf16_to_float(uint16_t x) {
  return widen_bf16(x);
}
uint16_t float_to_f16(float x) {
  return narrow_f16(x);
}
float f16_to_float(uint16_t x) {
  return widen_f16(x);
}

void add_into(void* dst, const void* src, std::size_t count, DataType type) {
  switch (type) {
    case DataType::f32:
      return add_f32(static_cast<float*>(dst), static_cast<const float*>(src), count);
    case DataType::bf16:
      return add_bf16(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), count);
    case DataType::f16:
      return add_f16(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), count);
  }
}

void scale(void* x, std::size_t count, float factor, DataType type) {
  switch (type) {
    case DataType::f32:
      return scale_f32(static_cast<float*>(x), count, factor);
    case DataType::bf16:
      return scale_bf16(static_cast<uint16_t*>(x), count, factor);
    case DataType::f16:
      return scale_f16(static_cast<uint16_t*>(x), count, factor);
  }
}

// Eight independent fp64 accumulators, so the loop vectorizes without reassociating
// a single sum (which the compiler may not do without -ffast-math).
TROUPE_MULTIVERSION
double sum_squares(const float* x, std::size_t count) {
  constexpr std::size_t lanes = 8;
  double acc[lanes] = {};
  std::size_t i = 0;
  for (; i + lanes <= count; i += lanes)
    for (std::size_t k = 0; k < lanes; ++k)
      acc[k] += static_cast<double>(x[i + k]) * static_cast<double>(x[i + k]);
  double sum = 0;
  for (; i < count; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  for (double a : acc) sum += a;
  return sum;
}

}  // namespace troupe::kernels
