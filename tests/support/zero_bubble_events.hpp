// An event-driven zero-bubble scheduler over a V of 2 chunks per rank with split backwards,
// for the tests (pipeline_events_test plans it, event_scheduler_rank trains with it). It
// decides as the list scheduler (pipeline/list_schedule.hpp) plans: an input half first (a
// neighbour waits for its gradient), then, once the rank is free, the deepest ready forward,
// then the oldest weight half, holding no more than 1F1B's stage 0. Forwards of chunk 1
// always run: they carry micro-batches already admitted towards the backwards that free
// memory, and a limit on every forward can hold back the very one that would free it,
// which stops the pipeline (zbv's plan at unit costs never meets that; real timing can). New micro-batches
// (forwards of chunk 0) are admitted only with room kept for their way back up.
#pragma once

#include <cstdint>
#include <optional>

#include "pipeline/events.hpp"

namespace troupe::testing {

using pipeline::Action;
using pipeline::EventScheduler;
using pipeline::Op;
using pipeline::RankView;

class ZeroBubbleEvents : public EventScheduler {
 public:
  explicit ZeroBubbleEvents(int64_t stages) : stages_(stages) {}

  std::optional<Action> next(const RankView& rank) override {
    std::optional<Action> pick = rank.oldest(Op::backward_input);
    if (!pick && rank.running == 0) pick = deepest_forward(rank);
    if (!pick && rank.running == 0) pick = rank.oldest(Op::backward_weight);
    if (pick && pick->op == Op::forward) ++(pick->chunk == 0 ? first_half_ : second_half_);
    return pick;
  }

 private:
  // A new micro-batch takes a slot now and one later for its forward back up the V: it is
  // admitted only when both fit in 1F1B's memory (2p chunk micro-batches) beside what is
  // held and what is already promised.
  bool room_for_one_more(const RankView& rank) const {
    return rank.held + (first_half_ - second_half_) + 2 <= 2 * stages_;
  }

  std::optional<Action> deepest_forward(const RankView& rank) const {
    std::optional<Action> pick;
    for (const Action& a : rank.ready) {
      if (a.op != Op::forward || (a.chunk == 0 && !room_for_one_more(rank))) continue;
      if (!pick || a.chunk > pick->chunk || (a.chunk == pick->chunk && a.micro < pick->micro)) pick = a;
    }
    return pick;
  }

  int64_t stages_;
  int64_t first_half_ = 0, second_half_ = 0;  // forwards chosen on chunk 0 and on chunk 1
};

}  // namespace troupe::testing
