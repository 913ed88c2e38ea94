// The same idea as budget_greedy, as a scheduler that decides from events instead of
// planning the step up front: whenever its stage can take work it runs the oldest
// backward that is ready (the previous stage waits for its gradient, and it frees
// memory); failing that, the oldest ready forward, but only while the stage holds fewer
// than `budget` micro-batches of activations and its activation memory is not over
// `limit_bytes` (when given: troupe tells it when the ledger crosses that line). It reacts
// to what actually arrives, so a slow stage or a late message changes its order, not its
// memory bound.
#pragma once

#include <troupe/scheduler.hpp>

#include <cstdint>
#include <optional>

namespace example {

class BudgetEvents : public troupe::EventScheduler {
 public:
  BudgetEvents(int64_t budget, int64_t limit_bytes) : budget_(budget), limit_bytes_(limit_bytes) {}

  void on_event(const troupe::Event& event, const troupe::RankView&) override {
    if (event.kind == troupe::EventKind::memory_over_limit) over_limit_ = true;
    if (event.kind == troupe::EventKind::memory_under_limit) over_limit_ = false;
  }

  std::optional<troupe::Action> next(const troupe::RankView& rank) override {
    if (auto backward = rank.oldest(troupe::Op::backward)) return backward;
    // Over the memory limit, forwards wait for a backward to free some; with nothing held
    // there is nothing to wait for, so it forwards anyway rather than stall.
    if (rank.held >= budget_ || (over_limit_ && rank.held > 0)) return std::nullopt;
    return rank.oldest(troupe::Op::forward);
  }

  int64_t activation_limit() const override { return limit_bytes_; }

 private:
  int64_t budget_, limit_bytes_;
  bool over_limit_ = false;
};

}  // namespace example
