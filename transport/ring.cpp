#include "transport/ring.hpp"

#include <algorithm>

#include "base/check.hpp"

namespace troupe::ring {

Span segment(std::size_t count, int64_t world, int64_t seg) {
  TROUPE_CHECK(world >= 1 && seg >= 0 && seg < world, "segment index out of range");
  auto w = static_cast<std::size_t>(world);
  auto s = static_cast<std::size_t>(seg);
  std::size_t base = count / w;
  std::size_t extra = count % w;
  return Span{s * base + std::min(s, extra), base + (s < extra ? 1 : 0)};
}

std::size_t chunks_per_segment(std::size_t count, int64_t world, std::size_t chunk_elems) {
  TROUPE_CHECK(chunk_elems > 0, "chunk of zero elements");
  std::size_t longest = segment(count, world, 0).count;
  return (longest + chunk_elems - 1) / chunk_elems;
}

Span chunk(std::size_t count, int64_t world, int64_t seg, std::size_t c, std::size_t chunk_elems) {
  Span s = segment(count, world, seg);
  std::size_t begin = std::min(s.count, c * chunk_elems);
  std::size_t end = std::min(s.count, begin + chunk_elems);
  return Span{s.begin + begin, end - begin};
}

AllReduceStep all_reduce_step(int64_t rank, int64_t world, int64_t step) {
  TROUPE_CHECK(world >= 2 && step >= 0 && step < all_reduce_steps(world), "ring step out of range");
  auto mod = [world](int64_t x) { return ((x % world) + world) % world; };
  if (step < world - 1) return {mod(rank - step), mod(rank - step - 1), true};
  int64_t t = step - (world - 1);
  return {mod(rank + 1 - t), mod(rank - t), false};
}

}  // namespace troupe::ring
