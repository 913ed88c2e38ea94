#include "pipeline/layout.hpp"

#include <fmt/format.h>

namespace troupe::pipeline {

int64_t Layout::virtual_stage(int64_t rank, int64_t chunk) const {
  if (kind == ChunkLayout::v_shape && chunk % 2 == 1) return (chunk + 1) * ranks - 1 - rank;
  return chunk * ranks + rank;
}

int64_t Layout::rank_of(int64_t stage) const {
  const int64_t chunk = stage / ranks, within = stage % ranks;
  return kind == ChunkLayout::v_shape && chunk % 2 == 1 ? ranks - 1 - within : within;
}

int64_t Layout::chunk_of(int64_t stage) const {
  return stage / ranks;
}

Status check_layout(const Layout& layout) {
  if (layout.ranks < 1 || layout.chunks < 1)
    return make_error(
        fmt::format("a pipeline needs at least one rank and one chunk per rank (ranks {}, chunks {})",
                    layout.ranks, layout.chunks));
  if (layout.kind == ChunkLayout::v_shape && layout.chunks != 2)
    return make_error(fmt::format("the v layout holds 2 chunks per rank, not {}", layout.chunks));
  return {};
}

}  // namespace troupe::pipeline
