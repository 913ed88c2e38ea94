#include "actors/step_driver.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <optional>

#include <fmt/format.h>

#include "actors/protocol/comm.hpp"
#include "actors/protocol/data.hpp"
#include "actors/protocol/engine.hpp"
#include "actors/protocol/stage.hpp"

namespace troupe {
namespace {

using Clock = std::chrono::steady_clock;

struct CurrentStep {
  int64_t step = 0;
  Clock::time_point start;
  caf::response_promise reply;
  int64_t tokens = 0;          // this rank's: counted as its micro-batches go to the stage
  std::optional<double> loss;  // set once gradients are reduced
};

struct StepDriverState {
  StepDriverOptions options;
  std::optional<CurrentStep> current;
  std::optional<caf::response_promise> finishing;
  static inline const char* name = "step_driver";
};
using StepDriver = caf::stateful_actor<StepDriverState>;

void finish_step(StepDriver* self, std::string error, const step_applied& applied = {}) {
  auto& s = self->state;
  if (!s.current) return;
  CurrentStep& c = *s.current;
  double ms = std::chrono::duration<double, std::milli>(Clock::now() - c.start).count();
  c.reply.deliver(
      step_report{c.step, c.loss.value_or(0), ms, c.tokens * s.options.dp, std::move(error), applied.stats});
  s.current.reset();
}

void fetch(StepDriver* self, int64_t micro) {
  auto& s = self->state;
  auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(s.options.fetch_timeout_s));
  int64_t step = s.current->step;
  self->request(s.options.data_loader, timeout, fetch_micro_batch{step, micro})
      .then(
          [=](micro_batch_ready& ready) {
            auto& st = self->state;
            if (!st.current || st.current->step != step) return;
            // Counted as the micro-batch goes out: whatever the stage reports later, in
            // whichever order, the step's tokens are known.
            st.current->tokens += ready.tokens;
            self->send(st.options.stage, run_micro_batch{step, micro, st.options.micro_count, ready.batch});
            if (micro + 1 < st.options.micro_count) fetch(self, micro + 1);
          },
          [=](caf::error& e) {
            finish_step(self, fmt::format("fetching micro-batch {} of step {} failed: {}", micro, step,
                                          self->system().render(e)));
          });
}

caf::behavior step_driver_behavior(StepDriver* self, StepDriverOptions options) {
  self->state.options = std::move(options);
  Tracer* tracer = self->state.options.tracer;
  return {
      [=](train_step& t) {
        Tracer::Scope span(tracer, "step_driver", "train_step");
        auto& s = self->state;
        s.current = CurrentStep{t.step, Clock::now(), self->make_response_promise(), 0, std::nullopt};
        fetch(self, 0);
      },
      [=](gradients_ready& g) {
        Tracer::Scope span(tracer, "step_driver", "gradients_ready");
        auto& s = self->state;
        if (!s.current || s.current->step != g.step) return;
        s.current->loss = g.loss;
        self->send(s.options.stage, apply_step{g.step});
      },
      [=](step_applied& a) {
        Tracer::Scope span(tracer, "step_driver", "step_applied");
        auto& s = self->state;
        if (!s.current || s.current->step != a.step) return;
        finish_step(self, "", a);
      },
      [=](stage_failed& f) {
        Tracer::Scope span(tracer, "step_driver", "stage_failed");
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

caf::actor spawn_step_driver(caf::actor_system& system, StepDriverOptions options) {
  return system.spawn(step_driver_behavior, std::move(options));
}

}  // namespace troupe
