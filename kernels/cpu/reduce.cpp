#include "kernels/cpu/reduce.hpp"

namespace troupe::kernels {

void add_into(float* __restrict dst, const float* __restrict src, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) dst[i] += src[i];
}

void scale(float* x, std::size_t count, float factor) {
  for (std::size_t i = 0; i < count; ++i) x[i] *= factor;
}

}  // namespace troupe::kernels
