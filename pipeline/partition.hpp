// Cutting a model's layer sequence into pipeline stages: consecutive layers per stage, at
// least one each, as layer counts by stage.
//   uniform:  counts as even as possible (the first layers % stages stages get one more);
//   balanced: the cut whose costliest stage costs least, for any per-layer cost (parameter
//             counts for [pipeline] partition = "parameters", measured forward+backward
//             times for "profile");
//   explicit: the counts a config lists, checked against the model.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "base/result.hpp"

namespace troupe::pipeline {

Result<std::vector<int64_t>> partition_uniform(int64_t layers, int64_t stages);

/// `costs` by layer, each at least 0.
Result<std::vector<int64_t>> partition_balanced(const std::vector<double>& costs, int64_t stages);

/// Whether `counts` cuts `layers` into `stages` stages; the error says how it does not.
Status check_partition(const std::vector<int64_t>& counts, int64_t layers, int64_t stages);

}  // namespace troupe::pipeline
