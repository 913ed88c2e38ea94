// Resharding on load: a checkpoint's values are addressed by parameter name and element
// range, not by the rank or sub-group that wrote them, so a run with another dp, ZeRO
// stage, offload tier or pipeline cut finds what it owns by intersecting ranges.
//
// Each saved range says where a run of one parameter's flattened elements lies in a file;
// each wanted range says which run a rank needs and where it goes. plan_reads() returns
// the reads that fill every wanted element exactly once, or an error naming the first
// parameter and elements no file holds (a checkpoint of another model, or an incomplete
// one). Replicas may save the same range twice (ZeRO stage 0): the first file listed wins.
// Thread safety: pure functions.
#pragma once

#include <cstddef>
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

}  // namespace troupe
