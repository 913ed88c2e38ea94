// The arithmetic of chunked ring collectives, as pure functions (unit-tested alone).
//
// A buffer of `count` elements is cut into `world` segments (the first count % world
// segments one element longer). Each segment is cut into chunks of at most
// `chunk_elems`; chunk c of every segment forms an independent ring, so chunks move
// through the ring in a pipeline. An all-reduce is 2(world-1) steps per chunk:
// world-1 reduce-scatter steps, then world-1 all-gather steps.
#pragma once

#include <cstddef>
#include <cstdint>

namespace troupe::ring {

struct Span {
  std::size_t begin = 0;  ///< first element
  std::size_t count = 0;  ///< elements
};

/// Elements [begin, begin+count) of segment `segment` out of `world`.
Span segment(std::size_t count, int64_t world, int64_t segment);

/// Chunks per segment: enough for the longest segment (0 when count is 0).
std::size_t chunks_per_segment(std::size_t count, int64_t world, std::size_t chunk_elems);

/// Elements of chunk `chunk` of segment `seg` (may be empty for short segments).
Span chunk(std::size_t count, int64_t world, int64_t seg, std::size_t chunk, std::size_t chunk_elems);

/// What rank `rank` does at step `step` of an all-reduce ring.
struct AllReduceStep {
  int64_t send_segment;
  int64_t recv_segment;
  bool reduce;  ///< true: the received data is added into recv_segment (reduce-scatter phase)
};
AllReduceStep all_reduce_step(int64_t rank, int64_t world, int64_t step);
inline int64_t all_reduce_steps(int64_t world) {
  return 2 * (world - 1);
}

/// The segment a rank holds fully reduced after the reduce-scatter phase.
inline int64_t owned_segment(int64_t rank, int64_t world) {
  return (rank + 1) % world;
}

}  // namespace troupe::ring
