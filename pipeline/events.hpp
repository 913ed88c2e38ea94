// Schedulers that decide as the step goes. A schedule function (schedule.hpp) writes each
// rank's actions before the step; an EventScheduler instead hears what happens on its
// rank (a micro-batch loaded, an activation or a gradient arrived, a compute finished, a
// send completed, activation memory crossed its limit) and, whenever the rank can take
// more work, picks the next compute action from those whose inputs are there. troupe runs
// one per rank (include/troupe/scheduler.hpp registers the factory), adds the messages
// around each choice, as it does for schedule functions, and checks every choice: an
// action that is not ready, or a rank that chooses nothing when nothing more can come, is
// an error naming the scheduler. Before a job trains, the same scheduler runs on a model
// of the pipeline at unit costs (event_plan.hpp), which draws its timeline and refuses it
// if it gets stuck there.
// Thread safety: one EventScheduler per rank, called from one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "pipeline/action.hpp"

namespace troupe::pipeline {

enum class EventKind : uint8_t {
  step_started,        ///< a new step: nothing is ready until its inputs come
  batch_loaded,        ///< `action` (a load) has its micro-batch
  activation_arrived,  ///< `action` (a recv_activation) has its input
  gradient_arrived,    ///< `action` (a recv_gradient) has the gradient of its output
  compute_finished,    ///< `action` (a forward or a backward) ran
  send_completed,      ///< `action` (a send) is with its peer
  memory_over_limit,   ///< the rank's activation bytes rose above activation_limit()
  memory_under_limit,  ///< and fell back to it or below
};
/// "activation_arrived", ...
const char* event_name(EventKind kind);

struct Event {
  EventKind kind = EventKind::step_started;
  Action action;  ///< what it concerns; the step-wide and memory events concern none
};

/// What a rank's scheduler sees when it decides.
struct RankView {
  ScheduleShape shape;
  int64_t rank = 0;  ///< this rank's stage in the pipeline
  int64_t step = 0;  ///< 0 in the plan drawn before the job
  /// Compute actions that may run now, in the order they became ready: a forward whose
  /// micro-batch and activation are here, a backward (or input half) whose forward is
  /// chosen and whose gradient is here, a weight half whose input half is chosen.
  std::vector<Action> ready;
  int64_t running = 0;           ///< chosen and not finished: at most two, one computing, one behind it
  int64_t held = 0;              ///< chunk micro-batches held: forward chosen, (weight-half) backward not
  int64_t remaining = 0;         ///< compute actions of the step not chosen yet
  int64_t activation_bytes = 0;  ///< what the rank's ledger holds as activations (0 in the plan)

  /// The ready action of kind `op` with the lowest micro-batch (the first listed on a tie).
  std::optional<Action> oldest(Op op) const {
    std::optional<Action> pick;
    for (const Action& a : ready)
      if (a.op == op && (!pick || a.micro < pick->micro)) pick = a;
    return pick;
  }
};

class EventScheduler {
 public:
  virtual ~EventScheduler() = default;
  /// Something happened on the rank; `rank` is the state after it.
  virtual void on_event(const Event& event, const RankView& rank) {
    (void)event;
    (void)rank;
  }
  /// The next compute action to run, one of rank.ready; nullopt waits for the next event.
  virtual std::optional<Action> next(const RankView& rank) = 0;
  /// Activation bytes above which memory_over_limit fires; 0 never fires it.
  virtual int64_t activation_limit() const { return 0; }
};

/// Makes the scheduler of pipeline rank `rank`; called once per rank for a job (it lives
/// for every step) and once per rank for each plan.
using EventSchedulerFactory =
    std::function<std::unique_ptr<EventScheduler>(const ScheduleShape& shape, int64_t rank)>;

}  // namespace troupe::pipeline
