#include "kernels/cpu/precision.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace troupe::kernels {

void cast_from_f32(const float* x, void* out, std::size_t n, DataType to) {
  auto* half = static_cast<uint16_t*>(out);
  switch (to) {
    case DataType::f32:
      std::memcpy(out, x, n * sizeof(float));
      return;
    case DataType::bf16:
      for (std::size_t i = 0; i < n; ++i) half[i] = float_to_bf16(x[i]);
      return;
    case DataType::f16:
      for (std::size_t i = 0; i < n; ++i) half[i] = float_to_f16(x[i]);
      return;
  }
}

void cast_to_f32(const void* x, DataType from, float* out, std::size_t n) {
  const auto* half = static_cast<const uint16_t*>(x);
  switch (from) {
    case DataType::f32:
      std::memcpy(out, x, n * sizeof(float));
      return;
    case DataType::bf16:
      for (std::size_t i = 0; i < n; ++i) out[i] = bf16_to_float(half[i]);
      return;
    case DataType::f16:
      for (std::size_t i = 0; i < n; ++i) out[i] = f16_to_float(half[i]);
      return;
  }
}

bool has_nonfinite(const float* x, std::size_t n) {
  // Exponent bits all ones is inf or NaN; OR-ing a flag keeps the loop branch-free.
  uint32_t any = 0;
  for (std::size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, sizeof bits);
    any |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return any != 0;
}

}  // namespace troupe::kernels
