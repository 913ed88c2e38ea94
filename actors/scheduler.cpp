#include "actors/scheduler.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "actors/protocol/comm.hpp"
#include "actors/protocol/data.hpp"
#include "actors/protocol/engine.hpp"
#include "actors/protocol/pipeline.hpp"
#include "actors/protocol/stage.hpp"

namespace troupe {
namespace {

using Clock = std::chrono::steady_clock;
using pipeline::Op;

struct CurrentStep {
  int64_t step = 0;
  Clock::time_point start;
  caf::response_promise reply;
  std::size_t next = 0;                      // the next action to hand over
  int64_t unfinished = 0;                    // handed over, not finished
  std::map<int64_t, MicroBatchPtr> batches;  // fetched, not handed over yet
  std::optional<gradients_ready> gradients;
};

struct SchedulerState {
  SchedulerOptions options;
  std::optional<CurrentStep> current;
  std::optional<caf::response_promise> finishing;
  static inline const char* name = "scheduler";
};
using Scheduler = caf::stateful_actor<SchedulerState>;

void finish_step(Scheduler* self, std::string error, const step_applied& applied = {}) {
  auto& s = self->state;
  if (!s.current) return;
  CurrentStep& c = *s.current;
  double ms = std::chrono::duration<double, std::milli>(Clock::now() - c.start).count();
  double loss = c.gradients ? c.gradients->loss : 0;
  int64_t tokens = c.gradients ? c.gradients->tokens : 0;
  StepStats stats = applied.stats;
  if (c.gradients && ms > 0)
    stats.bubble =
        std::max(0.0, 1.0 - c.gradients->busy_s * 1000.0 / (static_cast<double>(s.options.stages) * ms));
  c.reply.deliver(step_report{c.step, loss, ms, tokens, std::move(error), stats});
  s.current.reset();
}

// Hands the stage the next actions while the window has room; a load waits for its batch.
void dispatch(Scheduler* self) {
  auto& s = self->state;
  const auto& program = s.options.program;
  while (s.current && s.current->next < program.size() && s.current->unfinished < s.options.window) {
    CurrentStep& c = *s.current;
    const pipeline::Action& a = program[c.next];
    stage_action out{c.step, static_cast<int64_t>(c.next), a, s.options.micro_count, nullptr};
    if (a.op == Op::load) {
      auto batch = c.batches.find(a.micro);
      if (batch == c.batches.end()) return;  // micro_batch_ready resumes
      out.batch = std::move(batch->second);
      c.batches.erase(batch);
    }
    ++c.next;
    ++c.unfinished;
    self->send(s.options.stage, std::move(out));
  }
}

void fetch(Scheduler* self, int64_t micro) {
  auto& s = self->state;
  auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(s.options.fetch_timeout_s));
  int64_t step = s.current->step;
  self->request(s.options.data_loader, timeout, fetch_micro_batch{step, micro})
      .then(
          [=](micro_batch_ready& ready) {
            auto& st = self->state;
            if (!st.current || st.current->step != step) return;
            st.current->batches[micro] = ready.batch;
            dispatch(self);
          },
          [=](caf::error& e) {
            finish_step(self, fmt::format("fetching micro-batch {} of step {} failed: {}", micro, step,
                                          self->system().render(e)));
          });
}

void start_step(Scheduler* self, int64_t step) {
  auto& s = self->state;
  s.current = CurrentStep{step, Clock::now(), self->make_response_promise(), 0, 0, {}, std::nullopt};
  // The loader prepares ahead of what is asked, in micro-batch order; asking for every
  // load now, in that order, keeps it busy whatever order the program loads them in.
  std::set<int64_t> loads;
  for (const auto& a : s.options.program)
    if (a.op == Op::load) loads.insert(a.micro);
  for (int64_t micro : loads) fetch(self, micro);
  dispatch(self);
}

void action_finished(Scheduler* self, int64_t step) {
  auto& s = self->state;
  if (!s.current || s.current->step != step) return;
  --s.current->unfinished;
  dispatch(self);
}

caf::behavior scheduler_behavior(Scheduler* self, SchedulerOptions options) {
  self->state.options = std::move(options);
  Tracer* tracer = self->state.options.tracer;
  return {
      [=](train_step& t) {
        Tracer::Scope span(tracer, "scheduler", "train_step");
        start_step(self, t.step);
      },
      [=](action_done& d) { action_finished(self, d.step); },
      [=](gradients_ready& g) {
        Tracer::Scope span(tracer, "scheduler", "gradients_ready");
        auto& s = self->state;
        if (!s.current || s.current->step != g.step) return;
        s.current->gradients = g;
        action_finished(self, g.step);
      },
      [=](step_applied& a) {
        Tracer::Scope span(tracer, "scheduler", "step_applied");
        auto& s = self->state;
        if (!s.current || s.current->step != a.step) return;
        finish_step(self, "", a);
      },
      [=](stage_failed& f) {
        Tracer::Scope span(tracer, "scheduler", "stage_failed");
        finish_step(self, f.error);
      },
      [=](finish_training&) {
        auto& s = self->state;
        s.finishing = self->make_response_promise();
        self->send(s.options.comm_agent, barrier_request{0, caf::actor_cast<caf::actor>(self)});
      },
      [=](collective_done& d) {
        auto& s = self->state;
        if (!s.finishing) return;
        s.finishing->deliver(d);
        s.finishing.reset();
      },
  };
}

}  // namespace

caf::actor spawn_scheduler(caf::actor_system& system, SchedulerOptions options) {
  return system.spawn(scheduler_behavior, std::move(options));
}

}  // namespace troupe
