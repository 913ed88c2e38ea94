#include "pipeline/simulate.hpp"

#include <algorithm>
#include <string>

#include <fmt/format.h>

namespace troupe::pipeline {
namespace {

// Where in a stage's program each action of each micro-batch sits (-1: nowhere).
struct Positions {
  explicit Positions(int64_t micro_batches)
      : of(kOps, std::vector<int64_t>(static_cast<std::size_t>(micro_batches), -1)) {}
  static constexpr std::size_t kOps = static_cast<std::size_t>(Op::optimizer_step) + 1;
  int64_t& at(Op op, int64_t micro) {
    return of[static_cast<std::size_t>(op)][static_cast<std::size_t>(micro)];
  }
  std::vector<std::vector<int64_t>> of;
  int64_t reduce = -1, step = -1;
};

Error at(int64_t stage, int64_t index, const Action& action, const std::string& what) {
  return make_error(fmt::format("stage {}, action {} ({}): {}", stage, index, describe(action), what));
}

// An action this stage may not take at all, or "" when it may.
std::string misplaced(Op op, bool first, bool last) {
  if (op == Op::load && !first && !last) return "only the first and the last stage load micro-batches";
  if ((op == Op::recv_activation || op == Op::send_gradient) && first)
    return "the first stage has no previous stage";
  if ((op == Op::send_activation || op == Op::recv_gradient) && last)
    return "the last stage has no next stage";
  return "";
}

// Records every action's position; an action out of range, misplaced or repeated is an error.
Result<Positions> locate(const Program& program, int64_t stage, int64_t stages, int64_t m) {
  Positions p(m);
  const bool first = stage == 0, last = stage == stages - 1;
  for (std::size_t k = 0; k < program.size(); ++k) {
    const Action& a = program[k];
    const auto index = static_cast<int64_t>(k);
    const bool step_wide = a.op == Op::reduce_gradients || a.op == Op::optimizer_step;
    if (step_wide ? a.micro != -1 : (a.micro < 0 || a.micro >= m))
      return at(stage, index, a,
                step_wide ? "a step-wide action takes no micro-batch"
                          : fmt::format("micro-batches are numbered 0 to {}", m - 1));
    if (std::string why = misplaced(a.op, first, last); !why.empty()) return at(stage, index, a, why);
    int64_t& slot = a.op == Op::reduce_gradients ? p.reduce
                    : a.op == Op::optimizer_step ? p.step
                                                 : p.at(a.op, a.micro);
    if (slot >= 0) return at(stage, index, a, fmt::format("repeats action {}", slot));
    slot = index;
  }
  return p;
}

// `before` must come before `after` for micro-batch i (both required when `needed`).
Status ordered(const Program& program, int64_t stage, Positions& p, int64_t i, Op before, Op after,
               bool needed) {
  const int64_t b = p.at(before, i), a = p.at(after, i);
  if (!needed) return {};
  if (b < 0 || a < 0)
    return make_error(
        fmt::format("stage {}: micro-batch {} has no {}", stage, i, op_name(b < 0 ? before : after)));
  if (b > a)
    return at(stage, a, program[static_cast<std::size_t>(a)],
              fmt::format("comes before {} {} (action {})", op_name(before), i, b));
  return {};
}

Status check_program(const Program& program, int64_t stage, int64_t stages, int64_t m) {
  auto located = locate(program, stage, stages, m);
  if (!located) return located.error();
  Positions& p = *located;
  const bool first = stage == 0, last = stage == stages - 1;
  int64_t last_backward = -1;
  for (int64_t i = 0; i < m; ++i) {
    TROUPE_TRY(ordered(program, stage, p, i, Op::forward, Op::backward, true));
    TROUPE_TRY(ordered(program, stage, p, i, Op::load, Op::forward, first || last));
    TROUPE_TRY(ordered(program, stage, p, i, Op::recv_activation, Op::forward, !first));
    TROUPE_TRY(ordered(program, stage, p, i, Op::forward, Op::send_activation, !last));
    TROUPE_TRY(ordered(program, stage, p, i, Op::recv_gradient, Op::backward, !last));
    TROUPE_TRY(ordered(program, stage, p, i, Op::backward, Op::send_gradient, !first));
    last_backward = std::max(last_backward, p.at(Op::backward, i));
  }
  if (p.reduce < 0 || p.step < 0)
    return make_error(fmt::format("stage {}: the program has no {}", stage,
                                  p.reduce < 0 ? "reduce_gradients" : "optimizer_step"));
  if (p.reduce < last_backward)
    return at(stage, p.reduce, program[static_cast<std::size_t>(p.reduce)], "comes before the last backward");
  if (p.step < p.reduce)
    return at(stage, p.step, program[static_cast<std::size_t>(p.step)], "comes before reduce_gradients");
  return {};
}

// Messages sent to one stage by one neighbour that it has not taken yet (by micro-batch).
using Inbox = std::vector<int64_t>;

struct StageRun {
  std::size_t next = 0;    // the action it runs next
  int64_t busy_until = 0;  // computing until this instant
  int64_t held = 0, peak = 0, busy = 0;
  std::vector<TimedAction> timeline;
  std::string waiting_for;  // why the next action cannot run, for a deadlock's message
};

class Executor {
 public:
  Executor(const std::vector<Program>& programs, int64_t credits)
      : programs_(programs),
        credits_(credits),
        runs_(programs.size()),
        activations_(programs.size()),
        gradients_(programs.size()) {}

  Result<Simulation> run() {
    for (int64_t now = 0;; ++now) {
      while (advance_all(now)) {
      }
      if (std::none_of(runs_.begin(), runs_.end(), [&](const StageRun& r) { return r.busy_until > now; }))
        return finished() ? Result<Simulation>(simulation()) : Result<Simulation>(deadlock());
    }
  }

 private:
  // One pass over the stages at instant `now`; whether any stage moved.
  bool advance_all(int64_t now) {
    bool moved = false;
    for (std::size_t s = 0; s < runs_.size(); ++s)
      while (runs_[s].busy_until <= now && runs_[s].next < programs_[s].size() && take(s, now)) moved = true;
    return moved;
  }

  // Runs stage s's next action if it can; false when it must wait.
  bool take(std::size_t s, int64_t now) {
    StageRun& r = runs_[s];
    const Action& a = programs_[s][r.next];
    switch (a.op) {
      case Op::forward:
        r.peak = std::max(r.peak, ++r.held);
        return compute(r, a, now);
      case Op::backward:
        --r.held;
        return compute(r, a, now);
      case Op::send_activation:
        return send(r, activations_[s + 1], a, fmt::format("stage {}", s + 1));
      case Op::send_gradient:
        return send(r, gradients_[s - 1], a, fmt::format("stage {}", s - 1));
      case Op::recv_activation:
        return receive(r, activations_[s], a, fmt::format("stage {}", s - 1));
      case Op::recv_gradient:
        return receive(r, gradients_[s], a, fmt::format("stage {}", s + 1));
      case Op::load:
      case Op::reduce_gradients:
      case Op::optimizer_step:
        ++r.next;
        return true;
    }
    return false;
  }

  static bool compute(StageRun& r, const Action& a, int64_t now) {
    r.timeline.push_back(TimedAction{a, now});
    r.busy_until = now + 1;
    ++r.busy;
    ++r.next;
    return true;
  }

  bool send(StageRun& r, Inbox& to, const Action& a, const std::string& peer) {
    if (static_cast<int64_t>(to.size()) >= credits_) {
      r.waiting_for = fmt::format("for {} to take one of the {} it holds", peer, credits_);
      return false;
    }
    to.push_back(a.micro);
    ++r.next;
    return true;
  }

  static bool receive(StageRun& r, Inbox& from, const Action& a, const std::string& peer) {
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
      if (const StageRun& r = runs_[s]; r.next < programs_[s].size())
        stuck.push_back(fmt::format("stage {} waits at action {} ({}) {}", s, r.next,
                                    describe(programs_[s][r.next]), r.waiting_for));
    return make_error(fmt::format("the schedule deadlocks: {}", fmt::join(stuck, "; ")));
  }

  Simulation simulation() const {
    Simulation out;
    for (const StageRun& r : runs_) {
      out.slots = std::max(out.slots, r.busy_until);
      out.busy_slots.push_back(r.busy);
      out.peak_activations.push_back(r.peak);
      out.timeline.push_back(r.timeline);
    }
    return out;
  }

  const std::vector<Program>& programs_;
  const int64_t credits_;
  std::vector<StageRun> runs_;
  std::vector<Inbox> activations_;  // by receiving stage: from the stage before it
  std::vector<Inbox> gradients_;    // by receiving stage: from the stage after it
};

}  // namespace

double Simulation::bubble() const {
  int64_t busy = 0;
  for (int64_t b : busy_slots) busy += b;
  const auto capacity = static_cast<double>(busy_slots.size()) * static_cast<double>(slots);
  return capacity > 0 ? 1.0 - static_cast<double>(busy) / capacity : 0.0;
}

Result<Simulation> simulate(const std::vector<Program>& programs, int64_t micro_batches, int64_t credits) {
  if (programs.empty()) return make_error("a pipeline needs at least one stage");
  if (micro_batches < 1) return make_error("a step needs at least one micro-batch");
  if (credits < 1) return make_error("sends need at least one receive buffer (credit) per neighbour");
  const auto stages = static_cast<int64_t>(programs.size());
  for (int64_t s = 0; s < stages; ++s)
    TROUPE_TRY(check_program(programs[static_cast<std::size_t>(s)], s, stages, micro_batches));
  return Executor(programs, credits).run();
}

}  // namespace troupe::pipeline
