// ZeroPlan: how one stage's parameters are laid out and partitioned for a ZeRO stage,
// and the model-state bytes each rank will hold as a result.
//
// Unless the policy partitions parameters (stages 0-2), parameters are laid out in reverse
// model order (the order backward produces gradients) in rows of at most
// reduce_bucket_size elements: each row is one gradient bucket, cut into one block (stage
// 0, all-reduced) or dp blocks (stages 1-2). Partitioned parameters (stage 3) give each
// layer a row of its own (gathered before the layer runs, freed after) and put the
// parameters of at most param_persistence_threshold elements into one persistent row
// that stays gathered.
//
// A tensor several layers use (tied weights) is laid out once, in the first layer that
// uses it; the later ones borrow it. In stage 3 a layer's rows are then its own and the
// rows of what it borrows, all gathered before it runs. A dedicated parameter has a row
// to itself at every stage.
//
// estimate_model_state() predicts what the runtime allocates, byte for byte, from the
// same plan: the layout's padding, the bucket buffers, and for stage 3 the live window
// the FetchPlanner reaches replaying forward then backward.
// Thread safety: pure functions over plain values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/result.hpp"
#include "memory/fetch_planner.hpp"
#include "memory/flat_layout.hpp"
#include "memory/memory_ledger.hpp"
#include "memory/zero_policy.hpp"

namespace troupe {

struct ZeroPlanInput {
  ZeroPolicy policy;
  int64_t dp = 1;
  /// Element counts of each layer's parameters, layers in model order: the tensors a
  /// layer is the first to use (a tensor shared by several layers counts once).
  std::vector<std::vector<std::size_t>> layers;
  /// By layer (or empty: nothing is shared): the parameters it uses that an earlier layer
  /// holds, as indices in model order (every layer's parameters above, concatenated).
  std::vector<std::vector<std::size_t>> borrowed;
  std::size_t reduce_bucket_size = 6553600;
  std::size_t persistence_threshold = 100000;
  /// Partitioned parameters: elements each rank's block of a row is aligned to (see FlatLayout::make);
  /// page_block_align when the parameter partition lives on NVMe.
  std::size_t block_align = FlatLayout::default_align;
  /// By parameter index (or empty: none): parameters that get a row of their own, never
  /// the persistent one. A weight tied across pipeline stages is laid out so on every
  /// stage that uses it, so each rank's block of it is the same elements everywhere and
  /// the stages can sum its reduced gradients block for block.
  std::vector<bool> dedicated;
};

/// Block alignment that puts every rank's block on a 4 KiB page (fp32).
constexpr std::size_t page_block_align = 1024;

struct ZeroPlan {
  ZeroPolicy policy;
  FlatLayout layout;
  /// Layout position -> model parameter index (layers' parameters concatenated).
  std::vector<std::size_t> parameter_of;
  /// Partitioned parameters: the rows each layer needs gathered, its own first (if it has
  /// one), then those of the tensors it borrows; empty when all it uses stays gathered.
  std::vector<std::vector<std::size_t>> layer_rows;
  /// Partitioned parameters: the layer whose parameters each row holds (-1 for the
  /// persistent row).
  std::vector<int64_t> row_layer;
  /// Partitioned parameters: rows that stay gathered (else every row is false).
  std::vector<bool> persistent_rows;
  bool persistent(std::size_t row) const { return row < persistent_rows.size() && persistent_rows[row]; }
  std::size_t parameter_elements = 0;  ///< the model's parameters, without padding
};

Result<ZeroPlan> plan_zero(const ZeroPlanInput& input);

/// What drives the estimate besides the plan.
struct ModelStateInputs {
  int64_t optimizer_states_per_element = 2;  ///< adam/adamw 2, sgd with momentum 1, plain sgd 0
  int64_t bucket_buffers = 2;                ///< stages 2-3: 2 with overlap_comm, else 1
  FetchPlanner::Limits limits;               ///< stage 3
  /// Bytes of a parameter or gradient element: 4 (fp32), or 2 under mixed precision, when
  /// the shard owner also keeps an fp32 master copy of its partition (optimizer state).
  int64_t element_bytes = 4;
  bool master_copy = false;
  /// Bytes of a gradient as it is reduced: element_bytes, or 4 when a 16-bit model reduces
  /// in fp32 (stages 0-1 then hold an fp32 copy of the flat gradients beside theirs).
  int64_t reduce_bytes = 4;
};

/// Bytes one rank holds, by kind, at the peak of a step.
MemoryBytes estimate_model_state(const ZeroPlan& plan, const ModelStateInputs& inputs);

/// Elements stage 3 holds gathered at its peak: the persistent row plus the live window.
std::size_t stage3_peak_gathered(const ZeroPlan& plan, const FetchPlanner::Limits& limits);

}  // namespace troupe
