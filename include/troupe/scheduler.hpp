// Writing your own pipeline scheduler. troupe takes two kinds, registered by name and
// chosen with [pipeline] schedule = "name" (on every rank, before Engine::make):
//
// A schedule function: the step's whole plan up front. From the step's shape (stages,
// micro-batches, chunks per rank) it returns each rank's compute actions in order:
//
//   troupe::register_scheduler("greedy", [](const troupe::ScheduleShape& shape) {
//     std::vector<std::vector<troupe::Action>> ranks(shape.stages);
//     ...  // ranks[r]: {troupe::Op::forward, micro, chunk}, {troupe::Op::backward, ...}, ...
//     return ranks;
//   });
//
// A rank's list holds, for every micro-batch and chunk, one forward and either one whole
// backward (Op::backward) or its two halves: Op::backward_input, the gradient the previous
// stage waits for, then Op::backward_weight, which nothing waits for and which a zero-bubble
// schedule places in what would be idle time. troupe adds the rest: the micro-batch loads,
// the activation received before each forward and sent after it, the gradient received
// before each backward and sent after it, and the step's gradient reduction and update.
// Before anything trains, the simulated executor runs every rank's list on a model of the
// pipeline and refuses a schedule that would deadlock (naming the stage, the action and
// what it waits for), that misses or repeats an action, or that runs one out of order.
//
// An event-driven scheduler: an EventScheduler per rank that decides as the step goes. It
// hears each event of its rank (a micro-batch loaded, an activation or a gradient arrived,
// a compute finished, a send completed, activation memory crossed activation_limit()) and,
// whenever the rank can take work, returns the next compute action from RankView::ready,
// or nothing to wait:
//
//   struct BackwardFirst : troupe::EventScheduler {
//     std::optional<troupe::Action> next(const troupe::RankView& rank) override {
//       for (const troupe::Action& a : rank.ready) if (a.op != troupe::Op::forward) return a;
//       if (!rank.ready.empty() && rank.held < 2) return rank.ready.front();
//       return std::nullopt;
//     }
//   };
//   troupe::register_event_scheduler("backward_first", [](const troupe::ScheduleShape&, int64_t) {
//     return std::make_unique<BackwardFirst>();
//   });
//
// troupe adds the same messages around each choice and checks each: a choice that is not
// ready, or choosing nothing while nothing runs and nothing more can arrive, stops the job
// with an error naming the scheduler, the stage, what was ready and what it waited for; a
// wait on another rank ends within the collective timeout with the same. Before the job
// trains, the schedulers run one step on the simulated pipeline at unit costs: that is the
// timeline `troupe schedule show --schedule NAME` draws, and a scheduler stuck there is
// refused before anything starts.
//
// simulate() is there to try a scheduler out, as `troupe schedule show` does for the
// built-ins; examples/scheduler registers one of each kind and trains the built-in GPT.
// Thread safety: the register functions may be called from any thread, before the engine
// that uses them is made; each EventScheduler is called from one thread at a time.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/result.hpp"
#include "pipeline/action.hpp"
#include "pipeline/events.hpp"
#include "pipeline/layout.hpp"
#include "pipeline/schedule.hpp"
#include "pipeline/simulate.hpp"

namespace troupe {

using pipeline::Action;
using pipeline::ChunkLayout;
using pipeline::Event;
using pipeline::EventKind;
using pipeline::EventScheduler;
using pipeline::EventSchedulerFactory;
using pipeline::Op;
using pipeline::RankView;
using pipeline::ScheduleFunction;
using pipeline::ScheduleShape;

/// Makes `name` a schedule a job may name ([pipeline] schedule = "name"). `layout` and
/// `virtual_stages` say where the chunks sit when the function plans more than one per
/// rank. An error when the name is a built-in's or taken, or `make` is empty.
inline Status register_scheduler(const std::string& name, ScheduleFunction make,
                                 ChunkLayout layout = ChunkLayout::interleaved, int64_t virtual_stages = 1) {
  return pipeline::register_schedule(
      name, pipeline::CustomSchedule{std::move(make), layout, virtual_stages, {}, false});
}

/// Makes `name` an event-driven scheduler a job may name: `make` makes each pipeline
/// rank's EventScheduler. `split_backward`: its backwards run as an input half then a
/// weight half (ready lists hold Op::backward_input and Op::backward_weight), not whole.
/// An error when the name is a built-in's or taken, or `make` is empty.
inline Status register_event_scheduler(const std::string& name, EventSchedulerFactory make,
                                       bool split_backward = false,
                                       ChunkLayout layout = ChunkLayout::interleaved,
                                       int64_t virtual_stages = 1) {
  return pipeline::register_schedule(
      name, pipeline::CustomSchedule{nullptr, layout, virtual_stages, std::move(make), split_backward});
}

}  // namespace troupe
