// The scheduler actor, event-driven: the rank's EventScheduler chooses each compute action
// from the frontier (pipeline/frontier.hpp) as the actions before it finish, and the
// program grows by each choice with the messages around it. Loads join as micro-batches
// are fetched; activation receives are posted in micro-batch order, kReceiveCredits at a
// time per chunk; a forward's output gradient is received once the forward is chosen.
#include <exception>

#include <fmt/format.h>

#include "actors/scheduler/state.hpp"

namespace troupe::scheduling {
namespace {

using pipeline::Action;
using pipeline::Event;
using pipeline::EventKind;
using pipeline::Op;

pipeline::ScheduleShape shape_of(const SchedulerOptions& o) {
  return pipeline::ScheduleShape{o.layout.ranks, o.micro_count, o.layout.chunks};
}

int64_t activation_bytes(const SchedulerOptions& o) {
  return o.ledger ? o.ledger->current()[MemoryKind::activations] : 0;
}

pipeline::RankView view_of(const Scheduler* self) {
  const auto& s = self->state;
  return s.current->frontier->view(shape_of(s.options), s.current->step, activation_bytes(s.options));
}

std::string prefix(const Scheduler* self) {
  const auto& o = self->state.options;
  return fmt::format("scheduler \"{}\" on stage {}", o.policy_name, o.stage);
}

// Tells the rank's scheduler; its exception fails the step, naming it.
bool tell(Scheduler* self, const Event& event) {
  try {
    self->state.options.policy->on_event(event, view_of(self));
    return true;
  } catch (const std::exception& e) {
    finish_step(self,
                fmt::format("{} threw on {}: {}", prefix(self), pipeline::event_name(event.kind), e.what()));
    return false;
  }
}

// The activation bytes crossed the scheduler's limit since the last look: it hears of it.
bool check_memory(Scheduler* self) {
  auto& s = self->state;
  const int64_t limit = s.options.policy->activation_limit();
  if (limit <= 0) return true;
  const bool over = activation_bytes(s.options) > limit;
  if (over == s.current->over_limit) return true;
  s.current->over_limit = over;
  return tell(self, Event{over ? EventKind::memory_over_limit : EventKind::memory_under_limit, {}});
}

void post_receives(Scheduler* self) {
  CurrentStep& c = *self->state.current;
  for (const Action& receive : c.frontier->receives_to_post()) c.program.push_back(receive);
}

// The program after a choice: the compute action and the messages it makes or awaits.
void append_choice(CurrentStep& c, const Action& a) {
  const pipeline::Frontier& f = *c.frontier;
  c.program.push_back(a);
  if (a.op == Op::forward && !f.last(a.chunk)) {
    c.program.push_back({Op::send_activation, a.micro, a.chunk});
    c.program.push_back({Op::recv_gradient, a.micro, a.chunk});
  }
  if (pipeline::makes_input_gradient(a.op) && !f.first(a.chunk))
    c.program.push_back({Op::send_gradient, a.micro, a.chunk});
}

// Asks the scheduler while fewer than kComputeLookahead computes are chosen and unfinished. A
// choice that is not ready, or nothing chosen when nothing runs and nothing more can come,
// fails the step with what the rank had.
void decide(Scheduler* self) {
  auto& s = self->state;
  CurrentStep& c = *s.current;
  pipeline::Frontier& f = *c.frontier;
  while (f.running() < pipeline::kComputeLookahead && !f.all_chosen()) {
    std::optional<Action> pick;
    try {
      pick = s.options.policy->next(view_of(self));
    } catch (const std::exception& e) {
      return finish_step(self, fmt::format("{} threw choosing: {}", prefix(self), e.what()));
    }
    if (!pick) break;
    if (Status chosen = f.choose(*pick); !chosen)
      return finish_step(self, fmt::format("{} {}", prefix(self), chosen.error().message));
    append_choice(c, *pick);
  }
  if (f.all_chosen() && !c.wrapped_up) {
    c.wrapped_up = true;
    c.program.push_back({Op::reduce_gradients, -1, 0});
    c.program.push_back({Op::optimizer_step, -1, 0});
  }
  if (!f.all_chosen() && f.running() == 0 && !f.anything_coming())
    finish_step(self, fmt::format("{} chose nothing with {} actions left, ready: {}, and nothing more can "
                                  "arrive until it does: it would wait forever",
                                  prefix(self), f.remaining(), f.ready_names()));
}

// The scheduler hears of it, receives are posted, and it chooses.
void react(Scheduler* self, const Event& event) {
  if (!tell(self, event) || !check_memory(self)) return;
  post_receives(self);
  decide(self);
}

}  // namespace

bool event_driven(const Scheduler* self) {
  return static_cast<bool>(self->state.options.policy);
}

void begin_events(Scheduler* self) {
  auto& s = self->state;
  CurrentStep& c = *s.current;
  c.frontier.emplace(s.options.layout, s.options.stage, s.options.micro_count, s.options.split_backward);
  react(self, Event{EventKind::step_started, {}});
}

void batch_fetched(Scheduler* self, int64_t micro) {
  CurrentStep& c = *self->state.current;
  for (int64_t chunk = 0; chunk < self->state.options.layout.chunks; ++chunk)
    if (c.frontier->loads(chunk)) c.program.push_back({Op::load, micro, chunk});
}

void event_happened(Scheduler* self, std::size_t index) {
  CurrentStep& c = *self->state.current;
  if (index >= c.program.size()) return;
  const Action a = c.program[index];
  pipeline::Frontier& f = *c.frontier;
  EventKind kind;
  switch (a.op) {
    case Op::load:
      f.loaded(a.micro, a.chunk);
      kind = EventKind::batch_loaded;
      break;
    case Op::recv_activation:
      f.activation_arrived(a.micro, a.chunk);
      kind = EventKind::activation_arrived;
      break;
    case Op::recv_gradient:
      f.gradient_arrived(a.micro, a.chunk);
      kind = EventKind::gradient_arrived;
      break;
    case Op::send_activation:
    case Op::send_gradient:
      kind = EventKind::send_completed;
      break;
    case Op::reduce_gradients:
    case Op::optimizer_step:
      return;
    default:
      f.finished(a);
      kind = EventKind::compute_finished;
  }
  react(self, Event{kind, a});
}

std::string decision_context(const Scheduler* self) {
  const auto& s = self->state;
  if (!event_driven(self) || !s.current || !s.current->frontier) return "";
  const pipeline::Frontier& f = *s.current->frontier;
  return fmt::format(" ({} had {} actions left, ready: {}; waiting for {})", prefix(self), f.remaining(),
                     f.ready_names(), f.waiting_for());
}

}  // namespace troupe::scheduling
