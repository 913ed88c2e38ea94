#include "memory/parameter_runs.hpp"

#include <algorithm>

namespace troupe {

void ParameterSteps::advance(const ParameterUse& used) {
  for (std::size_t p = 0; p < counts_.size(); ++p)
    if (is_used(used, p)) ++counts_[p];
}

std::vector<UpdateSegment> update_segments(const std::vector<ParameterRun>& runs, std::size_t count,
                                           const ParameterUse& used, const ParameterSteps& steps) {
  std::vector<UpdateSegment> segments;
  bool extends = false;  // the previous run was used: a used neighbour of its step joins it
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const ParameterRun& run = runs[i];
    if (!is_used(used, run.parameter)) {
      extends = false;
      continue;
    }
    int64_t step = steps[run.parameter];
    std::size_t end = i + 1 == runs.size() ? count : run.offset + run.count;
    if (extends && segments.back().step == step) {
      segments.back().count = end - segments.back().offset;
    } else {
      std::size_t begin = i == 0 ? 0 : run.offset;
      segments.push_back(UpdateSegment{begin, end - begin, step});
    }
    extends = true;
  }
  return segments;
}

std::vector<ParameterRun> runs_within(const std::vector<ParameterRun>& runs, std::size_t offset,
                                      std::size_t count) {
  std::vector<ParameterRun> inside;
  for (const ParameterRun& run : runs) {
    std::size_t begin = std::max(run.offset, offset), end = std::min(run.offset + run.count, offset + count);
    if (begin < end) inside.push_back(ParameterRun{begin - offset, end - begin, run.parameter});
  }
  return inside;
}

}  // namespace troupe
