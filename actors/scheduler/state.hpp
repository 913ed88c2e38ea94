// The scheduler actor's state and the functions its files share (actors/scheduler.cpp:
// steps, micro-batches, the step's sums; scheduler/decide.cpp: the event-driven mode, where
// the rank's EventScheduler chooses each compute action as the step goes). Private to the
// scheduler actor.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "actors/protocol/data.hpp"
#include "actors/protocol/stage.hpp"
#include "actors/scheduler.hpp"
#include "memory/host_buffer.hpp"
#include "pipeline/frontier.hpp"

namespace troupe::scheduling {

using Clock = std::chrono::steady_clock;

struct CurrentStep {
  int64_t step = 0;  // a validation batch's number when `eval`
  bool eval = false;
  Clock::time_point start;
  caf::response_promise reply;
  pipeline::Program program;                 // the options' program, or (event-driven) as it is decided
  std::size_t next = 0;                      // the next action of `program` to hand over
  int64_t unfinished = 0;                    // actions handed to chunks and not finished
  std::map<int64_t, MicroBatchPtr> batches;  // fetched, with loads still to hand over
  std::map<int64_t, int64_t> loads_left;     // by micro-batch
  std::size_t gradients_in = 0;              // chunks that answered reduce_gradients
  gradients_ready mine;                      // their answers, summed
  std::optional<gradients_ready> gradients;  // the step's, once known
  std::size_t applied_in = 0;                // chunks that answered optimizer_step
  bool compute_handed = false;               // a compute action handed over, not on the stream yet
  StepStats stats;
  // Event-driven: what the rank may run next, and whether the step's end is handed over.
  std::optional<pipeline::Frontier> frontier;
  bool wrapped_up = false;
  bool over_limit = false;  // activation bytes above the scheduler's limit at the last look
};

struct SchedulerState {
  SchedulerOptions options;
  std::optional<CurrentStep> current;
  std::optional<caf::response_promise> finishing;
  std::shared_ptr<HostBuffer> summary;  // pp > 1: the step's sums by world rank
  static inline const char* name = "scheduler";
};
using Scheduler = caf::stateful_actor<SchedulerState>;

/// Ends the step: answers train_step (with `error` when it failed).
void finish_step(Scheduler* self, std::string error);
/// Hands the chunks the program's next actions.
void dispatch(Scheduler* self);

// decide.cpp
bool event_driven(const Scheduler* self);
/// The step begins: the rank's scheduler hears of it and the first receives are posted.
void begin_events(Scheduler* self);
/// Micro-batch `micro` is fetched: its loads join the program.
void batch_fetched(Scheduler* self, int64_t micro);
/// Action `index` of the program finished: the frontier and the scheduler hear of it,
/// and the scheduler chooses what runs next.
void event_happened(Scheduler* self, std::size_t index);
/// What the scheduler saw when the step failed, to add to its error; "" when not event-driven.
std::string decision_context(const Scheduler* self);

}  // namespace troupe::scheduling
