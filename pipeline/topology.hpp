// Where each rank sits in a tensor × pipeline × data-parallel grid: its stage, its replica
// (the data-parallel index), its position in its tensor-parallel group, the ranks of its
// data-parallel group (those holding the same shard of the same stage: ZeRO partitions over
// these, not the world) and its pipeline neighbours (at the same tensor-parallel position).
// Every rank derives the same grid from the same (dp, pp, tp, order), so no rank has to be
// told.
//
// Tensor parallelism is always the innermost axis: a tensor-parallel group is tp
// consecutive ranks, so with ranks packed per host it shares a host, and the collectives
// inside every layer's forward and backward take the shared-memory path.
//
// `order` names the axes from the fastest-varying to the slowest: "pp,dp" (the default)
// puts a pipeline's stages on consecutive ranks, so that with ranks packed per host the
// activations cross the fewest host boundaries; "dp,pp" puts a stage's data-parallel group
// on consecutive ranks instead.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.hpp"

namespace troupe::pipeline {

enum class GridOrder { pp_fastest, dp_fastest };

/// "pp,dp" or "dp,pp"; an error names the allowed values.
const char* grid_order_name(GridOrder order);

struct Grid {
  int64_t dp = 1;
  int64_t pp = 1;
  GridOrder order = GridOrder::pp_fastest;
  int64_t tp = 1;

  int64_t world_size() const { return dp * pp * tp; }
  /// The rank at (stage, replica, tensor-parallel position).
  int64_t rank_of(int64_t stage, int64_t replica, int64_t shard = 0) const;
};

struct RankPlace {
  int64_t stage = 0;
  int64_t replica = 0;
  int64_t shard = 0;                           ///< the position in the tensor-parallel group
  std::vector<int64_t> data_parallel_group;    ///< the stage's ranks at this shard, by replica
  std::vector<int64_t> tensor_parallel_group;  ///< the ranks sharing this stage and replica
  std::vector<int64_t> pipeline;               ///< the replica's ranks at this shard, by stage
  int64_t previous = -1;                     ///< the rank of the stage before, or -1
  int64_t next = -1;                         ///< the rank of the stage after, or -1
};

/// Where `rank` sits; an error when the grid is empty or the rank is outside it.
Result<RankPlace> place(const Grid& grid, int64_t rank);

}  // namespace troupe::pipeline
