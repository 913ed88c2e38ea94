#include "actors/scheduler.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "actors/protocol/comm.hpp"
#include "actors/protocol/pipeline.hpp"
#include "actors/protocol/scheduler.hpp"
#include "actors/scheduler/state.hpp"

namespace troupe::scheduling {
namespace {

using pipeline::Op;

constexpr uint64_t kSummaryTag = 1;        // the step's sums gathered over the world
constexpr uint64_t kFinishTag = 2;         // the barrier of finish_training
constexpr uint64_t kEvalTag = 3;           // a validation batch's loss sums gathered over the world
constexpr std::size_t kSummaryFields = 4;  // loss, gradient square sum, tokens, compute seconds

std::size_t chunk_count(const Scheduler* self) {
  return self->state.options.chunks.size();
}

Clock::time_point now(const Scheduler* self) {
  return self->state.options.clock ? self->state.options.clock() : Clock::now();
}

// The step's compute time summed over the stages, each stage's the mean of its replicas:
// with one stage, the mean the stage exchanged with its memory peaks after the update; in
// a pipeline, the shares gathered with the loss.
double busy_seconds(const SchedulerState& s, const CurrentStep& c) {
  return s.options.stages == 1 ? c.stats.busy_s : c.gradients->busy_s;
}

}  // namespace

void finish_step(Scheduler* self, std::string error) {
  auto& s = self->state;
  if (!s.current) return;
  CurrentStep& c = *s.current;
  if (c.eval) {
    c.reply.deliver(eval_report{0, std::move(error)});
    s.current.reset();
    return;
  }
  double ms = std::chrono::duration<double, std::milli>(now(self) - c.start).count();
  double loss = c.gradients ? c.gradients->loss : 0;
  int64_t tokens = c.gradients ? c.gradients->tokens : 0;
  StepStats stats = c.stats;
  if (c.gradients && ms > 0)
    stats.bubble =
        std::max(0.0, 1.0 - busy_seconds(s, c) * 1000.0 / (static_cast<double>(s.options.stages) * ms));
  c.reply.deliver(step_report{c.step, loss, ms, tokens, std::move(error), stats});
  s.current.reset();
}

// Hands the chunks the next actions while the window has room; a load waits for its
// batch. A step-wide action goes to every chunk of the rank. Event-driven, the program
// holds only what is decided, with its receives bounded by credits: no window.
void dispatch(Scheduler* self) {
  auto& s = self->state;
  const bool windowed = !event_driven(self) || s.current->eval;
  while (s.current && s.current->next < s.current->program.size() &&
         (!windowed || s.current->unfinished < s.options.window)) {
    CurrentStep& c = *s.current;
    const pipeline::Action a = c.program[c.next];
    stage_action out{c.step, static_cast<int64_t>(c.next), a, s.options.micro_count, nullptr, c.eval};
    if (a.op == Op::load) {
      auto batch = c.batches.find(a.micro);
      if (batch == c.batches.end()) return;  // micro_batch_ready resumes
      out.batch = batch->second;
      if (--c.loads_left[a.micro] == 0) c.batches.erase(batch);
    }
    // Chunks share the rank's compute stream: the next compute action waits until the one
    // before it is on the stream, so the stream runs them in program order.
    if (pipeline::is_compute(a.op) && chunk_count(self) > 1) {
      if (c.compute_handed) return;  // compute_started resumes
      c.compute_handed = true;
    }
    ++c.next;
    if (a.op == Op::reduce_gradients || a.op == Op::optimizer_step) {
      c.unfinished += static_cast<int64_t>(chunk_count(self));
      for (const caf::actor& chunk : s.options.chunks) self->send(chunk, out);
    } else {
      ++c.unfinished;
      self->send(s.options.chunks[static_cast<std::size_t>(a.chunk)], std::move(out));
    }
  }
}

namespace {

void fetch(Scheduler* self, int64_t micro) {
  auto& s = self->state;
  auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(s.options.fetch_timeout_s));
  int64_t step = s.current->step;
  const bool eval = s.current->eval;
  self->request(s.options.data_loader, timeout, fetch_micro_batch{step, micro, eval})
      .then(
          [=](micro_batch_ready& ready) {
            auto& st = self->state;
            if (!st.current || st.current->step != step || st.current->eval != eval) return;
            st.current->batches[micro] = ready.batch;
            if (event_driven(self) && !eval) batch_fetched(self, micro);
            dispatch(self);
          },
          [=](caf::error& e) {
            finish_step(
                self, fmt::format("fetching {}micro-batch {} of {} {} failed: {}", eval ? "validation " : "",
                                  micro, eval ? "batch" : "step", step, self->system().render(e)));
          });
}

void start_step(Scheduler* self, int64_t step) {
  auto& s = self->state;
  s.current = CurrentStep{};
  s.current->step = step;
  s.current->start = now(self);
  s.current->reply = self->make_response_promise();
  // The loader prepares ahead of what is asked, in micro-batch order; asking for every
  // load now, in that order, keeps it busy whatever order the program loads them in. With
  // a V of chunks the first and the last virtual stage share a rank: one fetch, two loads.
  for (const auto& a : s.options.program)
    if (a.op == Op::load) ++s.current->loads_left[a.micro];
  if (event_driven(self))
    begin_events(self);
  else
    s.current->program = s.options.program;
  if (!s.current) return;  // the scheduler failed at once
  for (const auto& [micro, loads] : s.current->loads_left) fetch(self, micro);
  dispatch(self);
}

// A validation batch's program has run: each chunk's loss sum and count, then the world's.
void gather_eval_loss(Scheduler* self) {
  auto& s = self->state;
  const int64_t batch = s.current->step;
  auto sums = std::make_shared<std::pair<double, double>>(0.0, 0.0);
  auto left = std::make_shared<std::size_t>(chunk_count(self));
  auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(s.options.fetch_timeout_s));
  for (const caf::actor& chunk : s.options.chunks) {
    self->request(chunk, timeout, eval_loss_request{batch})
        .then(
            [=](eval_loss& l) {
              auto& st = self->state;
              if (!st.current || !st.current->eval || st.current->step != batch) return;
              sums->first += l.sum;
              sums->second += static_cast<double>(l.count);
              if (--*left > 0) return;
              double* mine =
                  st.summary->as<double>() + kSummaryFields * static_cast<std::size_t>(st.options.world_rank);
              std::fill(mine, mine + kSummaryFields, 0.0);
              mine[0] = sums->first;
              mine[2] = sums->second;
              std::size_t floats = kSummaryFields * sizeof(double) / sizeof(float);
              BufferSpan out =
                  float_span(st.summary, 0, floats * static_cast<std::size_t>(st.options.world_size));
              BufferSpan in =
                  float_span(st.summary, floats * static_cast<std::size_t>(st.options.world_rank), floats);
              self->send(st.options.comm_agent,
                         all_gather_request{kEvalTag, std::move(in), std::move(out), world_communicator,
                                            caf::actor_cast<caf::actor>(self)});
            },
            [=](caf::error& e) {
              finish_step(self, fmt::format("validation batch {}: {}", batch, self->system().render(e)));
            });
  }
}

void on_eval_summary(Scheduler* self) {
  auto& s = self->state;
  if (!s.current || !s.current->eval) return;
  const double* all = s.summary->as<double>();
  double loss = 0, count = 0;
  for (std::size_t r = 0; r < static_cast<std::size_t>(s.options.world_size); ++r) {
    loss += all[kSummaryFields * r];
    count += all[kSummaryFields * r + 2];
  }
  s.current->reply.deliver(eval_report{count > 0 ? loss / count : 0.0, ""});
  s.current.reset();
}

// `index`: the action of the program that finished, or -1 for a step-wide answer.
void action_finished(Scheduler* self, int64_t step, int64_t index) {
  auto& s = self->state;
  if (!s.current || s.current->step != step) return;
  --s.current->unfinished;
  if (s.current->eval) {
    dispatch(self);
    if (s.current && s.current->next == s.current->program.size() && s.current->unfinished == 0)
      gather_eval_loss(self);
    return;
  }
  if (index >= 0 && event_driven(self)) event_happened(self, static_cast<std::size_t>(index));
  dispatch(self);
}

void start_eval(Scheduler* self, int64_t batch) {
  auto& s = self->state;
  s.current = CurrentStep{};
  CurrentStep& c = *s.current;
  c.step = batch;
  c.eval = true;
  c.start = now(self);
  c.reply = self->make_response_promise();
  if (s.options.eval_program.empty()) return finish_step(self, "the job has no validation program");
  c.program = s.options.eval_program;
  for (const auto& a : c.program)
    if (a.op == Op::load) ++c.loads_left[a.micro];
  for (const auto& [micro, loads] : c.loads_left) fetch(self, micro);
  dispatch(self);
}

// Every chunk's gradients are reduced over its group: with one stage the step's figures
// are known; with a pipeline this rank's sums join every rank's, gathered over the world
// and summed in rank order, so every rank has the same loss, norm and tokens.
void gradients_in(Scheduler* self) {
  auto& s = self->state;
  CurrentStep& c = *s.current;
  if (s.options.stages == 1) {
    c.gradients = c.mine;
    return;
  }
  double* mine = s.summary->as<double>() + kSummaryFields * static_cast<std::size_t>(s.options.world_rank);
  mine[0] = c.mine.loss;
  mine[1] = c.mine.square_sum;
  mine[2] = static_cast<double>(c.mine.tokens);
  mine[3] = c.mine.busy_s;
  std::size_t floats = kSummaryFields * sizeof(double) / sizeof(float);  // moved as raw bytes
  BufferSpan out = float_span(s.summary, 0, floats * static_cast<std::size_t>(s.options.world_size));
  BufferSpan in = float_span(s.summary, floats * static_cast<std::size_t>(s.options.world_rank), floats);
  self->send(s.options.comm_agent, all_gather_request{kSummaryTag, std::move(in), std::move(out),
                                                      world_communicator, caf::actor_cast<caf::actor>(self)});
}

void on_summary(Scheduler* self) {
  auto& s = self->state;
  if (!s.current) return;
  const double* all = s.summary->as<double>();
  double sums[kSummaryFields] = {};
  for (std::size_t r = 0; r < static_cast<std::size_t>(s.options.world_size); ++r)
    for (std::size_t k = 0; k < kSummaryFields; ++k) sums[k] += all[kSummaryFields * r + k];
  CurrentStep& c = *s.current;
  c.gradients = gradients_ready{c.step, sums[0], static_cast<int64_t>(sums[2]), sums[3], sums[1]};
  const double norm = sums[1] < 0 ? 0.0 : std::sqrt(sums[1]);  // a NaN (an overflow) stays NaN
  for (const caf::actor& chunk : s.options.chunks) self->send(chunk, gradients_summed{c.step, norm});
}

caf::behavior scheduler_behavior(Scheduler* self, SchedulerOptions options) {
  self->state.options = std::move(options);
  auto& opts = self->state.options;
  self->state.summary = std::make_shared<HostBuffer>(kSummaryFields * sizeof(double) *
                                                     static_cast<std::size_t>(opts.world_size));
  Tracer* tracer = opts.tracer;
  return {
      [=](train_step& t) {
        Tracer::Scope span(tracer, "scheduler", "train_step");
        start_step(self, t.step);
      },
      [=](eval_step& e) {
        Tracer::Scope span(tracer, "scheduler", "eval_step");
        start_eval(self, e.batch);
      },
      [=](action_done& d) { action_finished(self, d.step, d.index); },
      [=](compute_started& started) {
        auto& s = self->state;
        if (!s.current || s.current->step != started.step) return;
        s.current->compute_handed = false;
        dispatch(self);
      },
      [=](gradients_ready& g) {
        Tracer::Scope span(tracer, "scheduler", "gradients_ready");
        auto& s = self->state;
        if (!s.current || s.current->step != g.step) return;
        CurrentStep& c = *s.current;
        c.mine.step = g.step;
        c.mine.loss += g.loss;
        c.mine.tokens += g.tokens;
        c.mine.busy_s += g.busy_s;
        c.mine.square_sum += g.square_sum;
        if (++c.gradients_in == chunk_count(self)) gradients_in(self);
        action_finished(self, g.step, -1);
      },
      [=](step_applied& a) {
        Tracer::Scope span(tracer, "scheduler", "step_applied");
        auto& s = self->state;
        if (!s.current || s.current->step != a.step) return;
        if (s.current->applied_in++ == 0) s.current->stats = a.stats;  // the rank's ledger: alike
        --s.current->unfinished;
        if (s.current->applied_in == chunk_count(self)) finish_step(self, "");
      },
      [=](stage_failed& f) {
        Tracer::Scope span(tracer, "scheduler", "stage_failed");
        finish_step(self, f.error + decision_context(self));
      },
      [=](finish_training&) {
        auto& s = self->state;
        s.finishing = self->make_response_promise();
        self->send(s.options.comm_agent, barrier_request{kFinishTag, caf::actor_cast<caf::actor>(self)});
      },
      [=](collective_done& d) {
        auto& s = self->state;
        if (d.tag == kEvalTag) {
          if (!d.error.empty()) return finish_step(self, "gathering the validation loss failed: " + d.error);
          return on_eval_summary(self);
        }
        if (d.tag == kSummaryTag) {
          if (!d.error.empty())
            return finish_step(self, "gathering the step's loss and norm failed: " + d.error);
          return on_summary(self);
        }
        if (!s.finishing) return;
        s.finishing->deliver(d);
        s.finishing.reset();
      },
  };
}

}  // namespace

}  // namespace troupe::scheduling

namespace troupe {

caf::actor spawn_scheduler(caf::actor_system& system, SchedulerOptions options) {
  return system.spawn(scheduling::scheduler_behavior, std::move(options));
}

}  // namespace troupe
