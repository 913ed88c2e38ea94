#include "pipeline/topology.hpp"

#include <fmt/format.h>

namespace troupe::pipeline {

const char* grid_order_name(GridOrder order) {
  return order == GridOrder::pp_fastest ? "pp,dp" : "dp,pp";
}

int64_t Grid::rank_of(int64_t stage, int64_t replica, int64_t shard) const {
  const int64_t base = order == GridOrder::pp_fastest ? replica * pp + stage : stage * dp + replica;
  return base * tp + shard;
}

Result<RankPlace> place(const Grid& grid, int64_t rank) {
  if (grid.dp < 1 || grid.pp < 1 || grid.tp < 1)
    return make_error(fmt::format("a grid needs dp, pp and tp of at least 1 (dp {}, pp {}, tp {})", grid.dp,
                                  grid.pp, grid.tp));
  if (rank < 0 || rank >= grid.world_size())
    return make_error(fmt::format("rank {} is outside the grid of dp {} × pp {} × tp {} = {} ranks", rank,
                                  grid.dp, grid.pp, grid.tp, grid.world_size()));
  RankPlace p;
  p.shard = rank % grid.tp;
  const int64_t base = rank / grid.tp;
  p.stage = grid.order == GridOrder::pp_fastest ? base % grid.pp : base / grid.dp;
  p.replica = grid.order == GridOrder::pp_fastest ? base / grid.pp : base % grid.dp;
  for (int64_t r = 0; r < grid.dp; ++r) p.data_parallel_group.push_back(grid.rank_of(p.stage, r, p.shard));
  for (int64_t t = 0; t < grid.tp; ++t)
    p.tensor_parallel_group.push_back(grid.rank_of(p.stage, p.replica, t));
  for (int64_t s = 0; s < grid.pp; ++s) p.pipeline.push_back(grid.rank_of(s, p.replica, p.shard));
  if (p.stage > 0) p.previous = grid.rank_of(p.stage - 1, p.replica, p.shard);
  if (p.stage + 1 < grid.pp) p.next = grid.rank_of(p.stage + 1, p.replica, p.shard);
  return p;
}

}  // namespace troupe::pipeline
