#pragma once
// The upper median of a sample (the middle value, the higher of the two middle ones when
// the count is even), without sorting all of it; 0 for no values.
#include <algorithm>
#include <cstddef>
#include <vector>

namespace troupe {

inline double upper_median(std::vector<double> values) {
  if (values.empty()) return 0;
  const auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

}  // namespace troupe
