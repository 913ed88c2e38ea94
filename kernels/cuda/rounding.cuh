// fp16 bit patterns on the device, rounded to nearest even with NaN kept a NaN: the same
// results as the CPU's float_to_f16/f16_to_float (kernels/cpu/reduce.hpp). bf16 is one
// definition for both (kernels/bf16_bits.hpp: narrow_bf16, widen_bf16).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/bf16_bits.hpp"

namespace troupe::kernels::cuda {

__device__ inline uint16_t to_f16_bits(float x) {
  uint32_t bits = __float_as_uint(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>(((bits >> 16) & 0x8000u) | 0x7e00u);
  return __half_as_ushort(__float2half_rn(x));
}

// The device's conversion makes every NaN the canonical one; the CPU keeps sign and payload.
__device__ inline float from_f16_bits(uint16_t h) {
  if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0)
    return __uint_as_float((static_cast<uint32_t>(h & 0x8000u) << 16) | 0x7f800000u |
                           (static_cast<uint32_t>(h & 0x3ffu) << 13));
  return __half2float(__ushort_as_half(h));
}

}  // namespace troupe::kernels::cuda
