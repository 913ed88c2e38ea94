#include "pipeline/simulate.hpp"

#include <algorithm>
#include <string>

#include <fmt/format.h>

namespace troupe::pipeline {
namespace {

// "stage 1" with one chunk per rank, "stage 1, chunk 0" with more.
std::string where(const Layout& layout, int64_t rank, int64_t chunk) {
  return layout.chunks == 1 ? fmt::format("stage {}", rank) : fmt::format("stage {}, chunk {}", rank, chunk);
}

// Where in a rank's program each action of each chunk and micro-batch sits (-1: nowhere).
struct Positions {
  Positions(int64_t chunks, int64_t micro_batches)
      : chunks(chunks), micro_batches(micro_batches), of(kOpCount * chunks * micro_batches, -1) {}
  int64_t& at(Op op, int64_t chunk, int64_t micro) {
    return of[static_cast<std::size_t>((static_cast<int64_t>(op) * chunks + chunk) * micro_batches + micro)];
  }
  int64_t chunks, micro_batches;
  std::vector<int64_t> of;
  int64_t reduce = -1, step = -1;
};

Error at(int64_t stage, int64_t index, const Action& action, const std::string& what) {
  return make_error(fmt::format("stage {}, action {} ({}): {}", stage, index, describe(action), what));
}

// An action this chunk may not take at all, or "" when it may.
std::string misplaced(Op op, bool first, bool last) {
  if (op == Op::load && !first && !last) return "only the first and the last stage load micro-batches";
  if ((op == Op::recv_activation || op == Op::send_gradient) && first)
    return "the first stage has no previous stage";
  if ((op == Op::send_activation || op == Op::recv_gradient) && last)
    return "the last stage has no next stage";
  return "";
}

// Records every action's position; an action out of range, misplaced or repeated is an error.
Result<Positions> locate(const Program& program, int64_t rank, const Layout& layout, int64_t m) {
  Positions p(layout.chunks, m);
  for (std::size_t k = 0; k < program.size(); ++k) {
    const Action& a = program[k];
    const auto index = static_cast<int64_t>(k);
    const bool step_wide = a.op == Op::reduce_gradients || a.op == Op::optimizer_step;
    if (step_wide ? a.micro != -1 || a.chunk != 0 : (a.micro < 0 || a.micro >= m))
      return at(rank, index, a,
                step_wide ? "a step-wide action takes no micro-batch or chunk"
                          : fmt::format("micro-batches are numbered 0 to {}", m - 1));
    if (!step_wide && (a.chunk < 0 || a.chunk >= layout.chunks))
      return at(rank, index, a, fmt::format("chunks are numbered 0 to {}", layout.chunks - 1));
    if (!step_wide)
      if (std::string why = misplaced(a.op, layout.first(rank, a.chunk), layout.last(rank, a.chunk));
          !why.empty())
        return at(rank, index, a, why);
    int64_t& slot = a.op == Op::reduce_gradients ? p.reduce
                    : a.op == Op::optimizer_step ? p.step
                                                 : p.at(a.op, a.chunk, a.micro);
    if (slot >= 0) return at(rank, index, a, fmt::format("repeats action {}", slot));
    slot = index;
  }
  return p;
}

struct ChunkCheck {
  const Program& program;
  const Layout& layout;
  Positions& p;
  int64_t rank, chunk, micro;

  // `before` must come before `after` (both required when `needed`).
  Status ordered(Op before, Op after, bool needed) const {
    const int64_t b = p.at(before, chunk, micro), a = p.at(after, chunk, micro);
    if (!needed) return {};
    if (b < 0 || a < 0)
      return make_error(fmt::format("{}: micro-batch {} has no {}", where(layout, rank, chunk), micro,
                                    op_name(b < 0 ? before : after)));
    if (b > a)
      return at(rank, a, program[static_cast<std::size_t>(a)],
                fmt::format("comes before {} (action {})", describe({before, micro, chunk}), b));
    return {};
  }

  // One backward per micro-batch: whole, or both halves. Returns the op that makes the
  // input's gradient, or an error.
  Result<Op> backward_kind() const {
    const bool whole = p.at(Op::backward, chunk, micro) >= 0;
    const bool input = p.at(Op::backward_input, chunk, micro) >= 0;
    const bool weight = p.at(Op::backward_weight, chunk, micro) >= 0;
    const std::string who = fmt::format("{}: micro-batch {}", where(layout, rank, chunk), micro);
    if (whole && (input || weight)) return make_error(who + " has a whole backward and a split one");
    if (whole) return Op::backward;
    if (input && weight) return Op::backward_input;
    if (!input && !weight) return make_error(who + " has no backward");
    return make_error(who + (input ? " has backward_input but no backward_weight"
                                   : " has backward_weight but no backward_input"));
  }

  Status check() const {
    const bool first = layout.first(rank, chunk), last = layout.last(rank, chunk);
    if (p.at(Op::forward, chunk, micro) < 0)
      return make_error(fmt::format("{}: micro-batch {} has no forward", where(layout, rank, chunk), micro));
    auto gradient = backward_kind();
    if (!gradient) return gradient.error();
    TROUPE_TRY(ordered(Op::forward, *gradient, true));
    if (*gradient == Op::backward_input) TROUPE_TRY(ordered(Op::backward_input, Op::backward_weight, true));
    TROUPE_TRY(ordered(Op::load, Op::forward, first || last));
    TROUPE_TRY(ordered(Op::recv_activation, Op::forward, !first));
    TROUPE_TRY(ordered(Op::forward, Op::send_activation, !last));
    TROUPE_TRY(ordered(Op::recv_gradient, *gradient, !last));
    TROUPE_TRY(ordered(*gradient, Op::send_gradient, !first));
    return {};
  }
};

Status check_program(const Program& program, int64_t rank, const Layout& layout, int64_t m) {
  auto located = locate(program, rank, layout, m);
  if (!located) return located.error();
  Positions& p = *located;
  int64_t last_backward = -1;
  for (int64_t c = 0; c < layout.chunks; ++c)
    for (int64_t i = 0; i < m; ++i) {
      TROUPE_TRY((ChunkCheck{program, layout, p, rank, c, i}.check()));
      last_backward = std::max({last_backward, p.at(Op::backward, c, i), p.at(Op::backward_weight, c, i)});
    }
  if (p.reduce < 0 || p.step < 0)
    return make_error(fmt::format("stage {}: the program has no {}", rank,
                                  p.reduce < 0 ? "reduce_gradients" : "optimizer_step"));
  if (p.reduce < last_backward)
    return at(rank, p.reduce, program[static_cast<std::size_t>(p.reduce)], "comes before the last backward");
  if (p.step < p.reduce)
    return at(rank, p.step, program[static_cast<std::size_t>(p.step)], "comes before reduce_gradients");
  return {};
}

// Messages sent to one virtual stage by one neighbour that it has not taken yet (by micro-batch).
using Inbox = std::vector<int64_t>;

struct RankRun {
  std::size_t next = 0;    // the action it runs next
  int64_t busy_until = 0;  // computing until this instant
  int64_t held = 0, peak = 0, busy = 0;
  std::vector<TimedAction> timeline;
  std::string waiting_for;  // why the next action cannot run, for a deadlock's message
};

class Executor {
 public:
  Executor(const std::vector<Program>& programs, const Layout& layout, int64_t credits, const Costs& costs)
      : programs_(programs),
        layout_(layout),
        credits_(credits),
        costs_(costs),
        runs_(programs.size()),
        activations_(static_cast<std::size_t>(layout.virtual_stages())),
        gradients_(static_cast<std::size_t>(layout.virtual_stages())) {}

  Result<Simulation> run() {
    for (int64_t now = 0;; ++now) {
      while (advance_all(now)) {
      }
      const bool computing =
          std::any_of(runs_.begin(), runs_.end(), [&](const RankRun& r) { return r.busy_until > now; });
      if (!computing) return finished() ? Result<Simulation>(simulation()) : Result<Simulation>(deadlock());
    }
  }

 private:
  // One pass over the ranks at instant `now`; whether any rank moved.
  bool advance_all(int64_t now) {
    bool moved = false;
    for (std::size_t s = 0; s < runs_.size(); ++s)
      while (runs_[s].busy_until <= now && runs_[s].next < programs_[s].size() && take(s, now)) moved = true;
    return moved;
  }

  std::string peer(int64_t stage) const {
    return where(layout_, layout_.rank_of(stage), layout_.chunk_of(stage));
  }

  // Runs rank s's next action if it can; false when it must wait.
  bool take(std::size_t s, int64_t now) {
    RankRun& r = runs_[s];
    const Action& a = programs_[s][r.next];
    const int64_t stage = layout_.virtual_stage(static_cast<int64_t>(s), a.chunk);
    auto inbox = [](std::vector<Inbox>& boxes, int64_t at) -> Inbox& {
      return boxes[static_cast<std::size_t>(at)];
    };
    switch (a.op) {
      case Op::forward:
        r.peak = std::max(r.peak, ++r.held);
        return compute(r, a, now);
      case Op::backward:
      case Op::backward_weight:
        --r.held;
        return compute(r, a, now);
      case Op::backward_input:
        return compute(r, a, now);
      case Op::send_activation:
        return send(r, inbox(activations_, stage + 1), a, peer(stage + 1));
      case Op::send_gradient:
        return send(r, inbox(gradients_, stage - 1), a, peer(stage - 1));
      case Op::recv_activation:
        return receive(r, inbox(activations_, stage), a, peer(stage - 1));
      case Op::recv_gradient:
        return receive(r, inbox(gradients_, stage), a, peer(stage + 1));
      case Op::load:
      case Op::reduce_gradients:
      case Op::optimizer_step:
        ++r.next;
        return true;
    }
    return false;
  }

  bool compute(RankRun& r, const Action& a, int64_t now) const {
    const int64_t duration = costs_.of(a.op);
    r.timeline.push_back(TimedAction{a, now, duration});
    r.busy_until = now + duration;
    r.busy += duration;
    ++r.next;
    return true;
  }

  bool send(RankRun& r, Inbox& to, const Action& a, const std::string& peer) const {
    if (static_cast<int64_t>(to.size()) >= credits_) {
      r.waiting_for = fmt::format("for {} to take one of the {} it holds", peer, credits_);
      return false;
    }
    to.push_back(a.micro);
    ++r.next;
    return true;
  }

  static bool receive(RankRun& r, Inbox& from, const Action& a, const std::string& peer) {
    auto it = std::find(from.begin(), from.end(), a.micro);
    if (it == from.end()) {
      r.waiting_for = "for " + peer;
      return false;
    }
    from.erase(it);
    ++r.next;
    return true;
  }

  bool finished() const {
    for (std::size_t s = 0; s < runs_.size(); ++s)
      if (runs_[s].next < programs_[s].size()) return false;
    return true;
  }

  Error deadlock() const {
    std::vector<std::string> stuck;
    for (std::size_t s = 0; s < runs_.size(); ++s)
      if (const RankRun& r = runs_[s]; r.next < programs_[s].size())
        stuck.push_back(fmt::format("stage {} waits at action {} ({}) {}", s, r.next,
                                    describe(programs_[s][r.next]), r.waiting_for));
    return make_error(fmt::format("the schedule deadlocks: {}", fmt::join(stuck, "; ")));
  }

  Simulation simulation() const {
    Simulation out;
    out.chunks = layout_.chunks;
    for (const RankRun& r : runs_) {
      out.slots = std::max(out.slots, r.busy_until);
      out.busy_slots.push_back(r.busy);
      out.peak_activations.push_back(r.peak);
      out.timeline.push_back(r.timeline);
    }
    return out;
  }

  const std::vector<Program>& programs_;
  const Layout layout_;
  const int64_t credits_;
  const Costs costs_;
  std::vector<RankRun> runs_;
  std::vector<Inbox> activations_;  // by receiving virtual stage: from the one before it
  std::vector<Inbox> gradients_;    // by receiving virtual stage: from the one after it
};

}  // namespace

int64_t Costs::of(Op op) const {
  switch (op) {
    case Op::forward:
      return forward;
    case Op::backward:
      return backward_input + backward_weight;
    case Op::backward_input:
      return backward_input;
    case Op::backward_weight:
      return backward_weight;
    default:
      return 0;
  }
}

double Simulation::bubble() const {
  int64_t busy = 0;
  for (int64_t b : busy_slots) busy += b;
  const auto capacity = static_cast<double>(busy_slots.size()) * static_cast<double>(slots);
  return capacity > 0 ? 1.0 - static_cast<double>(busy) / capacity : 0.0;
}

double Simulation::peak_stage_activations() const {
  int64_t peak = 0;
  for (int64_t p : peak_activations) peak = std::max(peak, p);
  return static_cast<double>(peak) / static_cast<double>(chunks);
}

Result<Simulation> simulate(const std::vector<Program>& programs, const Layout& layout, int64_t micro_batches,
                            int64_t credits, const Costs& costs) {
  if (programs.empty()) return make_error("a pipeline needs at least one stage");
  TROUPE_TRY(check_layout(layout));
  if (static_cast<int64_t>(programs.size()) != layout.ranks)
    return make_error(fmt::format("{} programs for {} stages", programs.size(), layout.ranks));
  if (micro_batches < 1) return make_error("a step needs at least one micro-batch");
  if (credits < 1) return make_error("sends need at least one receive buffer (credit) per neighbour");
  if (costs.forward < 1 || costs.backward_input < 1 || costs.backward_weight < 1)
    return make_error("every compute action costs at least one slot");
  for (int64_t s = 0; s < layout.ranks; ++s)
    TROUPE_TRY(check_program(programs[static_cast<std::size_t>(s)], s, layout, micro_batches));
  return Executor(programs, layout, credits, costs).run();
}

Result<Simulation> simulate(const std::vector<Program>& programs, int64_t micro_batches, int64_t credits,
                            const Costs& costs) {
  const Layout layout{static_cast<int64_t>(programs.size()), 1, ChunkLayout::interleaved};
  return simulate(programs, layout, micro_batches, credits, costs);
}

}  // namespace troupe::pipeline
