// A seeded permutation of [0, n) evaluated one element at a time, in O(1) memory: the
// shuffled order of a corpus's samples without a table of them (a 4 GB corpus has tens of
// millions of samples).
//
// A balanced Feistel network over the smallest even power of two at least n, with
// splitmix64 as its round function, is a bijection on that domain; "cycle walking" (apply it
// again until the value falls below n) restricts it to [0, n), at most 4n / n = 4 tries on
// average. Different keys give unrelated orders.
// Thread safety: a value type; const methods are pure.
#pragma once

#include <cstdint>

#include "base/check.hpp"
#include "runtime/data/splitmix.hpp"

namespace troupe {

class Permutation {
 public:
  Permutation(uint64_t n, uint64_t key) : n_(n), key_(key) {
    TROUPE_CHECK(n >= 1, "a permutation of nothing");
    while ((uint64_t{1} << (2 * half_bits_)) < n) ++half_bits_;
  }

  uint64_t size() const { return n_; }

  /// The element at position i, i < size().
  uint64_t operator()(uint64_t i) const {
    TROUPE_CHECK(i < n_, "permutation index out of range");
    uint64_t x = i;
    do x = encrypt(x);
    while (x >= n_);
    return x;
  }

 private:
  static constexpr int kRounds = 6;

  uint64_t encrypt(uint64_t x) const {
    const uint64_t mask = (uint64_t{1} << half_bits_) - 1;
    uint64_t left = x >> half_bits_, right = x & mask;
    for (int round = 0; round < kRounds; ++round) {
      const uint64_t mixed =
          splitmix64(key_ ^ splitmix64(right + static_cast<uint64_t>(round) * kSplitmixGolden));
      const uint64_t next = left ^ (mixed & mask);
      left = right;
      right = next;
    }
    return (left << half_bits_) | right;
  }

  uint64_t n_;
  uint64_t key_;
  int half_bits_ = 1;
};

}  // namespace troupe
