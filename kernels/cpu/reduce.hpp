// Element-wise reduction kernels for collectives on host fp32 buffers.
// Plain loops written so the compiler vectorizes them; no actors, no allocation.
// Thread safety: pure functions on caller-owned memory.
#pragma once

#include <cstddef>

namespace troupe::kernels {

/// dst[i] += src[i] for i in [0, count). The ranges must not overlap.
void add_into(float* __restrict dst, const float* __restrict src, std::size_t count);

/// x[i] *= factor for i in [0, count).
void scale(float* x, std::size_t count, float factor);

}  // namespace troupe::kernels
