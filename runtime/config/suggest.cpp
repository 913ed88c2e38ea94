#include "runtime/config/suggest.hpp"

#include <algorithm>

namespace troupe {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Three rows of the dynamic-programming table: the row before last is needed for swaps.
  const std::size_t n = b.size();
  std::vector<std::size_t> before(n + 1), last(n + 1), row(n + 1);
  for (std::size_t j = 0; j <= n; ++j) last[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    row[0] = i;
    for (std::size_t j = 1; j <= n; ++j) {
      const std::size_t substitution = last[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      row[j] = std::min({last[j] + 1, row[j - 1] + 1, substitution});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        row[j] = std::min(row[j], before[j - 2] + 1);
      }
    }
    std::swap(before, last);
    std::swap(last, row);
  }
  return last[n];
}

std::optional<std::string> suggest(std::string_view word, const std::vector<std::string>& candidates) {
  const std::size_t limit = std::min<std::size_t>(2, std::max<std::size_t>(1, word.size() / 3));
  std::optional<std::string> best;
  std::size_t best_distance = limit + 1;
  for (const std::string& candidate : candidates) {
    const std::size_t distance = edit_distance(word, candidate);
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

}  // namespace troupe
