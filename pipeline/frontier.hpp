// What one rank of a pipeline may run next in the step under way, for an EventScheduler
// (events.hpp): its micro-batches loaded, activations and gradients arrived, compute
// actions chosen and finished, and from those the ready list. The scheduler actor keeps
// one per rank at run time and the plan (event_plan.hpp) one per modelled rank, so both
// judge a choice alike.
//
// Activations are received in micro-batch order per chunk, at most kReceiveCredits
// waiting at once (posted and not arrived, or arrived and not yet forwarded), as a stage
// running a schedule function does; the gradient of a micro-batch's output is received
// once its forward is chosen.
// Thread safety: a plain value, used by one thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "pipeline/action.hpp"
#include "pipeline/events.hpp"
#include "pipeline/layout.hpp"

namespace troupe::pipeline {

constexpr int64_t kReceiveCredits = 2;
/// Compute actions a rank's scheduler may have chosen and not finished: one computing and
/// one behind it, so the stream never waits for a decision. The run and the plan alike.
constexpr int64_t kComputeLookahead = 2;

class Frontier {
 public:
  /// Rank `rank` of `layout` for a step of `micro_batches`; `split`: backwards run as an
  /// input half then a weight half, not whole.
  Frontier(const Layout& layout, int64_t rank, int64_t micro_batches, bool split);

  /// The first and the last virtual stage load their micro-batches (inputs, targets).
  bool loads(int64_t chunk) const { return layout_.first(rank_, chunk) || layout_.last(rank_, chunk); }
  bool first(int64_t chunk) const { return layout_.first(rank_, chunk); }
  bool last(int64_t chunk) const { return layout_.last(rank_, chunk); }

  void loaded(int64_t micro, int64_t chunk);
  void activation_arrived(int64_t micro, int64_t chunk);
  void gradient_arrived(int64_t micro, int64_t chunk);
  /// The activation receives to post now (recv_activation actions), marked posted.
  std::vector<Action> receives_to_post();

  /// `action` is the next to run: an error says why it may not (names the action and
  /// what it waits for).
  Status choose(const Action& action);
  void finished(const Action& action);

  const std::vector<Action>& ready() const { return ready_; }
  int64_t running() const { return chosen_ - finished_; }
  int64_t held() const { return held_; }
  int64_t remaining() const { return total_ - chosen_; }
  bool all_chosen() const { return chosen_ == total_; }
  bool all_finished() const { return finished_ == total_; }
  /// Whether anything may still arrive without a new choice: a load, or a receive posted.
  bool anything_coming() const;
  /// The view a scheduler decides on.
  RankView view(const ScheduleShape& shape, int64_t step, int64_t activation_bytes) const;
  /// "activation 3 (chunk 1) from stage 2, gradient 1 from stage 3", or "nothing".
  std::string waiting_for() const;
  /// "F3, I2.1", or "none".
  std::string ready_names() const;

 private:
  struct Cell {
    bool loaded = false, posted = false, arrived = false, gradient = false;
    bool forward = false, input = false, weight = false;  // chosen
    bool listed[3] = {false, false, false};               // forward, input, weight on the ready list
  };
  Cell& cell(int64_t micro, int64_t chunk);
  const Cell& cell(int64_t micro, int64_t chunk) const;
  /// Lists what became ready on (micro, chunk).
  void refresh(int64_t micro, int64_t chunk);
  bool is_ready(int slot, int64_t micro, int64_t chunk) const;
  Op op_of(int slot) const;
  std::string where(int64_t chunk) const;

  Layout layout_;
  int64_t rank_, micro_batches_;
  bool split_;
  std::vector<Cell> cells_;
  std::vector<Action> ready_;
  std::vector<int64_t> next_receive_;  // by chunk: the next micro-batch whose activation to post
  int64_t total_ = 0, chosen_ = 0, finished_ = 0, held_ = 0;
};

}  // namespace troupe::pipeline
