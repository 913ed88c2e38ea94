// Which elements of a partition an optimizer step updates, and at which step count.
//
// LibTorch's optimizers skip a parameter whose gradient is undefined (it took no part in
// any forward pass of the step) and keep a step count per parameter, which Adam's bias
// correction reads. troupe updates flat spans of a partition, each holding pieces of
// several parameters (runs) with padding between them; update_segments() cuts a span into
// the stretches to update — the runs of parameters used in this step, neighbours with the
// same step count merged over the padding between them — so a step where every parameter
// was used and all counts agree is one stretch over the whole span, as before.
// Thread safety: plain values and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace troupe {

/// `count` elements at `offset` of a span belong to parameter `parameter` (its position
/// in the stage's layout).
struct ParameterRun {
  std::size_t offset = 0;
  std::size_t count = 0;
  std::size_t parameter = 0;
};

/// By layout position: whether the parameter got a gradient in the step on any rank.
/// Null: every parameter did.
using ParameterUse = std::shared_ptr<const std::vector<bool>>;

/// Whether the step updates the parameter at layout position `parameter`.
inline bool is_used(const ParameterUse& used, std::size_t parameter) {
  return !used || (parameter < used->size() && (*used)[parameter]);
}

/// Optimizer step counts by parameter: each advances only in the steps that update it.
class ParameterSteps {
 public:
  explicit ParameterSteps(std::size_t parameters = 0) : counts_(parameters, 0) {}
  /// A step begins: every used parameter's count goes up by one.
  void advance(const ParameterUse& used);
  /// The 1-based step the optimizer runs for `parameter` (after advance()).
  int64_t operator[](std::size_t parameter) const { return counts_[parameter]; }
  /// Every count, by parameter (a checkpoint saves them).
  const std::vector<int64_t>& counts() const { return counts_; }
  /// Continues from saved counts (as many as there are parameters).
  void restore(std::vector<int64_t> counts) { counts_ = std::move(counts); }

 private:
  std::vector<int64_t> counts_;
};

/// A stretch of a span to update at `step`.
struct UpdateSegment {
  std::size_t offset = 0;
  std::size_t count = 0;
  int64_t step = 0;
};

/// The stretches of a span of `count` elements holding `runs` (in offset order) that a step
/// updates: the used runs, merged with their neighbours of the same step count over the
/// padding between them; the first and last stretch reach the span's ends when they hold
/// its first and last run.
std::vector<UpdateSegment> update_segments(const std::vector<ParameterRun>& runs, std::size_t count,
                                           const ParameterUse& used, const ParameterSteps& steps);

/// The parts of `runs` inside [offset, offset + count), with offsets from `offset`.
std::vector<ParameterRun> runs_within(const std::vector<ParameterRun>& runs, std::size_t offset,
                                      std::size_t count);

}  // namespace troupe
