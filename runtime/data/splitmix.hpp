// SplitMix64: the counter-based hash behind every seeded choice in the data layer.
//
// splitmix64(x) is a bijective 64-bit mixer; hashing `key + i × golden` gives the i-th value
// of an independent stream for `key` without generating the i - 1 values before it, which
// is what lets any rank compute any sample of the global stream on its own.
// Thread safety: pure functions.
#pragma once

#include <cstdint>

namespace troupe {

inline constexpr uint64_t kSplitmixGolden = 0x9E3779B97F4A7C15ull;

/// Mixes `x` into a well-distributed 64-bit value (Steele, Lea, Flood 2014).
constexpr uint64_t splitmix64(uint64_t x) {
  x += kSplitmixGolden;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// The `index`-th value of the stream named by `seed`.
constexpr uint64_t splitmix_at(uint64_t seed, uint64_t index) {
  return splitmix64(splitmix64(seed) + index * kSplitmixGolden);
}

}  // namespace troupe
