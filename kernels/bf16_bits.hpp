// bf16 as bit patterns, one definition for the CPU kernels and the CUDA ones so that both
// round alike: fp32 → bf16 to nearest, ties to even, a NaN kept a (quiet) NaN; bf16 → fp32
// exactly. Compiled by the host compiler and by nvcc (__host__ __device__ there).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TROUPE_HOST_DEVICE __host__ __device__
#else
#define TROUPE_HOST_DEVICE
#endif

namespace troupe::kernels {

TROUPE_HOST_DEVICE inline uint32_t bits_of_float(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

TROUPE_HOST_DEVICE inline float float_of_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

TROUPE_HOST_DEVICE inline uint16_t narrow_bf16(float x) {
  uint32_t u = bits_of_float(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}

TROUPE_HOST_DEVICE inline float widen_bf16(uint16_t h) {
  return float_of_bits(static_cast<uint32_t>(h) << 16);
}

}  // namespace troupe::kernels
