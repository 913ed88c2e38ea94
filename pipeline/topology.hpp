// Where each rank sits in a pipeline-parallel × data-parallel grid: its stage, its replica
// (the data-parallel index), the ranks of its stage's data-parallel group (ZeRO partitions
// over these, not the world) and its pipeline neighbours. Every rank derives the same
// grid from the same (dp, pp, order), so no rank has to be told.
//
// `order` names the axes from the fastest-varying to the slowest: "pp,dp" (the default)
// puts a pipeline's stages on consecutive ranks, so that with ranks packed per host the
// activations cross the fewest host boundaries; "dp,pp" puts a stage's data-parallel group
// on consecutive ranks instead.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"

namespace troupe::pipeline {

enum class GridOrder { pp_fastest, dp_fastest };

/// "pp,dp" or "dp,pp"; an error names the allowed values.
Result<GridOrder> parse_grid_order(std::string_view order);
const char* grid_order_name(GridOrder order);

struct Grid {
  int64_t dp = 1;
  int64_t pp = 1;
  GridOrder order = GridOrder::pp_fastest;

  int64_t world_size() const { return dp * pp; }
  /// The rank at (stage, replica).
  int64_t rank_of(int64_t stage, int64_t replica) const;
};

struct RankPlace {
  int64_t stage = 0;
  int64_t replica = 0;
  std::vector<int64_t> data_parallel_group;  ///< the stage's ranks, by replica
  std::vector<int64_t> pipeline;             ///< the replica's ranks, by stage
  int64_t previous = -1;                     ///< the rank of the stage before, or -1
  int64_t next = -1;                         ///< the rank of the stage after, or -1
};

/// Where `rank` sits; an error when the grid is empty or the rank is outside it.
Result<RankPlace> place(const Grid& grid, int64_t rank);

}  // namespace troupe::pipeline
