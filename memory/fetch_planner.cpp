#include "memory/fetch_planner.hpp"

#include <algorithm>

namespace troupe {

FetchPlanner::FetchPlanner(std::vector<std::size_t> row_sizes, std::vector<bool> persistent, Limits limits)
    : sizes_(std::move(row_sizes)),
      persistent_(std::move(persistent)),
      limits_(limits),
      acquired_at_(sizes_.size(), 0),
      held_(sizes_.size(), false) {
  persistent_.resize(sizes_.size(), false);
  for (std::size_t r = 0; r < sizes_.size(); ++r)
    if (persistent_[r]) hold(r);
}

void FetchPlanner::begin_pass(std::size_t kind) {
  if (kind >= recordings_.size()) recordings_.resize(kind + 1);
  kind_ = kind;
  Recording& r = current();
  if (r.mode == Mode::invalid) {
    r.trace.clear();
    r.mode = Mode::record;
  } else if (r.mode == Mode::record) {
    r.mode = Mode::complete;
  }
  position_ = 0;
}

std::vector<std::size_t> FetchPlanner::acquire(std::size_t row) {
  std::vector<std::size_t> gather;
  Recording& r = current();
  if (r.mode == Mode::record) {
    r.trace.push_back(row);
  } else if (r.mode == Mode::complete && (position_ >= r.trace.size() || r.trace[position_] != row)) {
    r.mode = Mode::invalid;  // this pass runs another order: stop predicting it
    ++invalidations_;
  }
  if (!held_[row]) {
    hold(row);
    gather.push_back(row);
  }
  acquired_at_[row] = position_;
  if (r.mode == Mode::complete) prefetch_after(position_, gather);
  ++position_;
  return gather;
}

void FetchPlanner::prefetch_after(std::size_t position, std::vector<std::size_t>& out) {
  std::size_t room =
      limits_.max_live_parameters > held_elements_ ? limits_.max_live_parameters - held_elements_ : 0;
  std::size_t budget = std::min(limits_.prefetch_bucket_size, room);
  std::size_t planned = 0;
  const std::vector<std::size_t>& trace = current().trace;
  for (std::size_t j = position + 1; j < trace.size(); ++j) {
    std::size_t r = trace[j];
    if (held_[r]) continue;
    if (planned + sizes_[r] > budget) break;
    planned += sizes_[r];
    hold(r);
    out.push_back(r);
  }
}

bool FetchPlanner::reused_soon(std::size_t row) const {
  const Recording& r = current();
  if (r.mode != Mode::complete) return false;
  std::size_t between = 0;
  for (std::size_t j = acquired_at_[row] + 1; j < r.trace.size(); ++j) {
    if (r.trace[j] == row) return true;
    between += sizes_[r.trace[j]];
    if (between > limits_.max_reuse_distance) return false;
  }
  return false;
}

bool FetchPlanner::release(std::size_t row) {
  if (persistent_[row] || !held_[row] || reused_soon(row)) return false;
  drop(row);
  return true;
}

std::vector<std::size_t> FetchPlanner::end_pass() {
  std::vector<std::size_t> freed;
  for (std::size_t r = 0; r < sizes_.size(); ++r)
    if (held_[r] && !persistent_[r]) {
      drop(r);
      freed.push_back(r);
    }
  return freed;
}

void FetchPlanner::hold(std::size_t row) {
  held_[row] = true;
  held_elements_ += sizes_[row];
  peak_held_elements_ = std::max(peak_held_elements_, held_elements_);
}

void FetchPlanner::drop(std::size_t row) {
  held_[row] = false;
  held_elements_ -= sizes_[row];
}

}  // namespace troupe
