// Pipeline schedules as data: a schedule is a pure function of its shape (ranks,
// micro-batches, chunks per rank) returning each rank's program (action.hpp). Built in:
//   gpipe:            every forward, then every backward (m micro-batches held);
//   1f1b:             p − r − 1 warm-up forwards on rank r, then one forward and one
//                     backward in turn, then the rest of the backwards (PipeDream-Flush);
//   interleaved_1f1b: 1F1B over v chunks per rank laid out round-robin (Megatron's virtual
//                     pipeline): the bubble shrinks v-fold at v times the messages;
//   zb_h1:            1F1B with each backward split into its input half, which the previous
//                     stage waits for, and its weight half, run later where the pipeline
//                     would idle (Qi et al.'s ZB-H1: a third of 1F1B's bubble at F = B = W,
//                     with no more micro-batches held than 1F1B's stage 0);
//   zbv:              two chunks per rank in a V with split backwards (ZB-V), under 1F1B's
//                     activation memory; with m < 2p − 1 placed by a list scheduler.
// In zb_h1 and zbv the first virtual stage's input half followed at once by its own weight
// half runs as one whole backward (`B`): nothing waits for that input half, and the
// halves cost more.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "pipeline/action.hpp"
#include "pipeline/events.hpp"
#include "pipeline/layout.hpp"

namespace troupe::pipeline {

/// A schedule written in C++ (include/troupe/scheduler.hpp): every rank's compute
/// actions (forwards and backwards, whole or halved) in the order it runs them, rank 0
/// first; make_programs() surrounds them with their messages, and the simulated executor
/// checks the whole before a job runs it.
using ScheduleFunction = std::function<std::vector<std::vector<Action>>(const ScheduleShape& shape)>;

/// A schedule written in C++: either `make`, the whole step's actions up front, or
/// `events`, a scheduler per rank that decides as the step goes (events.hpp).
struct CustomSchedule {
  ScheduleFunction make;
  ChunkLayout layout = ChunkLayout::interleaved;  ///< where its chunks sit, with virtual stages
  int64_t virtual_stages = 1;                     ///< chunks per rank when the job names none
  EventSchedulerFactory events;
  bool split_backward = false;  ///< events only: its backwards run as input then weight halves
};

/// Makes `name` a schedule jobs may name ([pipeline] schedule). An error when the name is
/// a built-in's, already registered, empty, or the function is missing.
Status register_schedule(const std::string& name, CustomSchedule schedule);

/// The factory of `schedule` when it is an event-driven scheduler; empty otherwise.
EventSchedulerFactory event_scheduler(std::string_view schedule);

/// The names make_programs() knows: the built-ins in the order docs list them, then the
/// registered ones.
std::vector<std::string> schedule_names();

/// The chunks per rank `schedule` runs when none are asked for: 2 for interleaved_1f1b
/// and zbv, 1 for the others.
int64_t default_virtual_stages(std::string_view schedule);

/// Where `schedule` puts the chunks of `shape` (zbv: a V; the others round-robin).
Layout layout_of(std::string_view schedule, const ScheduleShape& shape);

/// Whether `schedule` can run `shape`: an error says why not (an unknown name, with the
/// known ones; fewer micro-batches than 1F1B's warm-up needs; interleaved with m not a
/// multiple of p; virtual stages on a schedule of one chunk per rank; zbv with v ≠ 2).
Status check_shape(std::string_view schedule, const ScheduleShape& shape);

/// The bubble (bubble/total) `schedule`'s paper gives at equal costs of a forward, an
/// input half and a weight half of a backward: 1F1B and GPipe (p − 1)/(m + p − 1);
/// interleaved over v chunks (p − 1)/(vm + p − 1); ZB-H1 idles p − 1 slots of 3m + p − 1;
/// ZBV idles no more than the last rank's wait for the first forward, (p − 1)/(6m + p − 1).
double bubble_formula(std::string_view schedule, const ScheduleShape& shape);

/// Every rank's program, rank 0 first. An event-driven scheduler's is its plan at unit
/// costs (event_plan.hpp).
Result<std::vector<Program>> make_programs(std::string_view schedule, const ScheduleShape& shape);

/// Rank `rank`'s program: make_programs()'s row.
Result<Program> make_program(std::string_view schedule, const ScheduleShape& shape, int64_t rank);

/// Whether `program` splits backwards into input and weight halves (and so needs
/// layers that defer their weights' gradients, and rows posted as weight halves end).
bool splits_backward(const Program& program);
bool splits_backward(const std::vector<Program>& programs);

/// Rank `rank`'s program around its compute actions in `order`: each forward with its
/// load (first and last virtual stage), the activation received before it and sent after
/// it; each backward (or input half) with the gradient received before it and sent after
/// it; and the step's reduce_gradients and optimizer_step at the end.
Program surround(const Layout& layout, int64_t rank, const std::vector<Action>& order);

}  // namespace troupe::pipeline
