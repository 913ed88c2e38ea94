// How a pipeline's model chunks sit on its ranks. With v virtual stages per rank the model
// is cut into p·v chunks, numbered along the model (the "virtual stages"), and rank r
// holds v of them:
//   interleaved (Megatron's virtual pipeline): chunk c of rank r is virtual stage c·p + r,
//     so a micro-batch goes down the ranks v times;
//   v_shape (ZBV): chunk 0 of rank r is virtual stage r and chunk 1 is 2p − 1 − r, so a
//     micro-batch goes down the ranks and back up, and rank 0 holds the first and the last
//     virtual stage (the loss).
// With v = 1 both are the plain pipeline: rank r is stage r.
// Thread safety: plain values.
#pragma once

#include <cstdint>

#include "base/result.hpp"

namespace troupe::pipeline {

enum class ChunkLayout { interleaved, v_shape };

struct Layout {
  int64_t ranks = 1;   ///< p
  int64_t chunks = 1;  ///< v: model chunks per rank
  ChunkLayout kind = ChunkLayout::interleaved;

  int64_t virtual_stages() const { return ranks * chunks; }
  /// The virtual stage that chunk `chunk` of rank `rank` is.
  int64_t virtual_stage(int64_t rank, int64_t chunk) const;
  /// The rank and the chunk that hold virtual stage `stage`.
  int64_t rank_of(int64_t stage) const;
  int64_t chunk_of(int64_t stage) const;
  bool first(int64_t rank, int64_t chunk) const { return virtual_stage(rank, chunk) == 0; }
  bool last(int64_t rank, int64_t chunk) const { return virtual_stage(rank, chunk) == virtual_stages() - 1; }
};

/// Whether `layout` can be laid out: at least one rank and chunk; v_shape takes v = 2.
Status check_layout(const Layout& layout);

}  // namespace troupe::pipeline
