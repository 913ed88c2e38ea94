// Writing your own pipeline scheduler. In troupe a pipeline schedule is data: for one
// training step, the compute actions each pipeline rank runs, in order. A scheduler is a
// function from the step's shape (stages, micro-batches, chunks per rank) to those lists:
//
//   troupe::register_scheduler("greedy", [](const troupe::ScheduleShape& shape) {
//     std::vector<std::vector<troupe::Action>> ranks(shape.stages);
//     ...  // ranks[r]: {troupe::Op::forward, micro, chunk}, {troupe::Op::backward, ...}, ...
//     return ranks;
//   });
//   // then [pipeline] schedule = "greedy" in the job, on every rank, before Engine::make
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
// simulate() is there to try a scheduler out, as `troupe schedule show` does for the
// built-ins; examples/scheduler registers one and trains the built-in GPT with it.
// Thread safety: register_scheduler may be called from any thread, before the engine
// that uses it is made.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/result.hpp"
#include "pipeline/action.hpp"
#include "pipeline/layout.hpp"
#include "pipeline/schedule.hpp"
#include "pipeline/simulate.hpp"

namespace troupe {

using pipeline::Action;
using pipeline::ChunkLayout;
using pipeline::Op;
using pipeline::ScheduleFunction;
using pipeline::ScheduleShape;

/// Makes `name` a schedule a job may name ([pipeline] schedule = "name"). `layout` and
/// `virtual_stages` say where the chunks sit when the function plans more than one per
/// rank. An error when the name is a built-in's or taken, or `make` is empty.
inline Status register_scheduler(const std::string& name, ScheduleFunction make,
                                 ChunkLayout layout = ChunkLayout::interleaved, int64_t virtual_stages = 1) {
  return pipeline::register_schedule(name, pipeline::CustomSchedule{std::move(make), layout, virtual_stages});
}

}  // namespace troupe
