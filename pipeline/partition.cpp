#include "pipeline/partition.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

namespace troupe::pipeline {
namespace {

Status check_counts(int64_t layers, int64_t stages) {
  if (stages < 1) return make_error(fmt::format("a pipeline needs at least one stage ({} given)", stages));
  if (layers < stages)
    return make_error(
        fmt::format("{} stages for {} layers: every stage needs at least one layer", stages, layers));
  return {};
}

// Consecutive parts, none costing more than `limit` (a part of one layer may: it cannot be cut).
std::vector<int64_t> greedy_parts(const std::vector<double>& costs, double limit) {
  std::vector<int64_t> counts{0};
  double sum = 0;
  for (double c : costs) {
    if (counts.back() > 0 && sum + c > limit) {
      counts.push_back(0);
      sum = 0;
    }
    ++counts.back();
    sum += c;
  }
  return counts;
}

// Fewer parts than stages: split the part with the most layers (its last layer becomes a
// part of its own) until there are enough. No part's cost grows.
void split_to(std::vector<int64_t>& counts, int64_t stages) {
  while (static_cast<int64_t>(counts.size()) < stages) {
    auto widest = std::max_element(counts.begin(), counts.end());
    --*widest;
    counts.insert(widest + 1, 1);
  }
}

}  // namespace

Result<std::vector<int64_t>> partition_uniform(int64_t layers, int64_t stages) {
  TROUPE_TRY(check_counts(layers, stages));
  std::vector<int64_t> counts(static_cast<std::size_t>(stages), layers / stages);
  for (int64_t s = 0; s < layers % stages; ++s) ++counts[static_cast<std::size_t>(s)];
  return counts;
}

Result<std::vector<int64_t>> partition_balanced(const std::vector<double>& costs, int64_t stages) {
  TROUPE_TRY(check_counts(static_cast<int64_t>(costs.size()), stages));
  for (std::size_t i = 0; i < costs.size(); ++i)
    if (!std::isfinite(costs[i]) || costs[i] < 0)
      return make_error(
          fmt::format("layer {} has cost {}: costs must be finite and at least 0", i, costs[i]));
  // The least limit at which the greedy cut needs at most `stages` parts, by bisection.
  double lo = *std::max_element(costs.begin(), costs.end());
  double hi = std::accumulate(costs.begin(), costs.end(), 0.0);
  for (int i = 0; i < 200 && lo < hi; ++i) {
    double mid = lo + (hi - lo) / 2;
    if (mid <= lo || mid >= hi) break;
    (static_cast<int64_t>(greedy_parts(costs, mid).size()) <= stages ? hi : lo) = mid;
  }
  std::vector<int64_t> counts = greedy_parts(costs, hi);
  split_to(counts, stages);
  return counts;
}

Status check_partition(const std::vector<int64_t>& counts, int64_t layers, int64_t stages) {
  TROUPE_TRY(check_counts(layers, stages));
  if (static_cast<int64_t>(counts.size()) != stages)
    return make_error(
        fmt::format("{} layer counts for {} stages: give one count per stage", counts.size(), stages));
  for (std::size_t s = 0; s < counts.size(); ++s)
    if (counts[s] < 1)
      return make_error(fmt::format("stage {} has {} layers: every stage needs at least one", s, counts[s]));
  int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  if (total != layers)
    return make_error(fmt::format("the counts [{}] add up to {} layers, but the model has {}",
                                  fmt::join(counts, ", "), total, layers));
  return {};
}

}  // namespace troupe::pipeline
