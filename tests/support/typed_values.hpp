// Test helper: fp32 values written into, and read back from, buffers of fp32, bf16 or
// fp16 (through the kernels' own conversions), for checking collectives in every type.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/reduce.hpp"

namespace troupe::testing {

inline std::vector<uint8_t> encode(const std::vector<float>& values, DataType type) {
  std::vector<uint8_t> out(values.size() * element_bytes(type));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (type == DataType::f32) {
      std::memcpy(&out[i * 4], &values[i], 4);
      continue;
    }
    uint16_t h =
        type == DataType::bf16 ? kernels::float_to_bf16(values[i]) : kernels::float_to_f16(values[i]);
    std::memcpy(&out[i * 2], &h, 2);
  }
  return out;
}

inline float decode(const std::vector<uint8_t>& bytes, std::size_t i, DataType type) {
  if (type == DataType::f32) {
    float f;
    std::memcpy(&f, &bytes[i * 4], 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, &bytes[i * 2], 2);
  return type == DataType::bf16 ? kernels::bf16_to_float(h) : kernels::f16_to_float(h);
}

}  // namespace troupe::testing
