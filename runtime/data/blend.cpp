#include "runtime/data/blend.hpp"

#include <algorithm>
#include <numeric>
#include <utility>

#include "base/check.hpp"

namespace troupe {

Blend::Blend(std::vector<double> weights) : weights_(std::move(weights)) {
  TROUPE_CHECK(!weights_.empty(), "a blend of no datasets");
  const double sum = std::accumulate(weights_.begin(), weights_.end(), 0.0);
  TROUPE_CHECK(sum > 0, "blend weights that sum to zero");
  for (double& w : weights_) w /= sum;
  marks_.emplace_back(weights_.size(), 0);
  cursor_.assign(weights_.size(), 0);
}

int Blend::choose(const std::vector<int64_t>& counts, int64_t i) const {
  const double at = std::max(static_cast<double>(i), 1.0);
  int best = 0;
  double best_error = weights_[0] * at - static_cast<double>(counts[0]);
  for (std::size_t k = 1; k < weights_.size(); ++k) {
    const double error = weights_[k] * at - static_cast<double>(counts[k]);
    if (error > best_error) {
      best_error = error;
      best = static_cast<int>(k);
    }
  }
  return best;
}

void Blend::walk(std::vector<int64_t>& counts, int64_t from, int64_t to) const {
  for (int64_t i = from; i < to; ++i) ++counts[static_cast<std::size_t>(choose(counts, i))];
}

Blend::Pick Blend::at(int64_t i) const {
  TROUPE_CHECK(i >= 0, "negative sample index");
  if (weights_.size() == 1) return Pick{0, i};
  std::lock_guard<std::mutex> lock(mutex_);
  const auto mark = static_cast<std::size_t>(i / kStride);
  while (marks_.size() <= mark) {
    std::vector<int64_t> next = marks_.back();
    const auto from = static_cast<int64_t>(marks_.size() - 1) * kStride;
    walk(next, from, from + kStride);
    marks_.push_back(std::move(next));
  }
  // Loaders ask in increasing order: continue from the last answer when it is close.
  if (!(cursor_at_ <= i && i - cursor_at_ < kStride)) {
    cursor_ = marks_[mark];
    cursor_at_ = static_cast<int64_t>(mark) * kStride;
  }
  walk(cursor_, cursor_at_, i);
  cursor_at_ = i;
  const int dataset = choose(cursor_, i);
  return Pick{dataset, cursor_[static_cast<std::size_t>(dataset)]};
}

}  // namespace troupe
