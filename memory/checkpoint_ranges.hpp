// Resharding on load: a checkpoint's values are addressed by parameter name and element
// range, not by the rank or sub-group that wrote them, so a run with another dp, ZeRO
// stage, offload tier or pipeline cut finds what it owns by intersecting ranges.
//
// Each saved range says where a run of one parameter's flattened elements lies in a file;
// each wanted range says which run a rank needs and where it goes. plan_reads() returns
// the reads that fill every wanted element exactly once, or an error naming the first
// parameter and elements no file holds (a checkpoint of another model, or an incomplete
// one). Replicas may save the same range twice (ZeRO stage 0): the first file listed wins.
// Under tensor parallelism both sides name runs of the whole tensor (whole_runs()).
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/result.hpp"

namespace troupe {

struct SavedRange {
  std::string parameter;   ///< the parameter's name ("layer.path.name")
  std::size_t offset = 0;  ///< first element, in the parameter's flattened order
  std::size_t count = 0;
  std::string file;    ///< the checkpoint file holding it
  std::size_t at = 0;  ///< where in the file, in elements
};

struct WantedRange {
  std::string parameter;
  std::size_t offset = 0;
  std::size_t count = 0;
  std::size_t into = 0;  ///< where the elements go, in the caller's buffer
};

struct RangeRead {
  std::string file;
  std::size_t from = 0;  ///< elements into the file
  std::size_t count = 0;
  std::size_t into = 0;  ///< elements into the caller's buffer
};

/// The reads that fill `wanted` from `saved`, in the order of `wanted`, adjacent reads of
/// one file merged.
Result<std::vector<RangeRead>> plan_reads(const std::vector<SavedRange>& saved,
                                          const std::vector<WantedRange>& wanted);

/// Where the tensor a rank holds lies in the model's whole tensor under tensor parallelism:
/// dimension `dim` of `whole_shape` is `blocks` equal blocks, and the rank holds slice
/// `index` of `parts` equal slices of each, the slices in block order (a fused q/k/v
/// projection has three blocks). `parts` 1: the rank holds the whole tensor.
struct TensorShard {
  std::vector<int64_t> whole_shape;
  int64_t dim = 0;
  int64_t blocks = 1;
  int64_t index = 0;
  int64_t parts = 1;
  bool whole() const { return parts == 1; }
};

/// A run of a shard's flattened elements that is contiguous in the whole tensor too.
struct ShardRun {
  std::size_t whole_offset = 0;  ///< in the whole tensor's flattened order
  std::size_t count = 0;
  std::size_t shard_offset = 0;  ///< in the shard's flattened order
};

/// Elements [offset, offset + count) of `shard` as runs of the whole tensor, in shard order.
/// Resharding across tensor parallelism addresses saved and wanted elements this way, so a
/// checkpoint saved at one tp loads at another.
std::vector<ShardRun> whole_runs(const TensorShard& shard, std::size_t offset, std::size_t count);

}  // namespace troupe
