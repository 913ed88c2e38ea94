// The scheduler actor (the "engine" actor of ARCHITECTURE.md): runs one training step at
// a time by walking this rank's stage program (pipeline/action.hpp), handing the stage
// actor its actions in order, at most `window` of them unfinished at once. It fetches the
// micro-batches of the program's loads from the data loader ahead of use and hands each
// to the stage with its load action; reduce_gradients is answered with the step's loss and
// norm, optimizer_step ends the step.
//
// Protocol (actors/protocol/engine.hpp): train_step → step_report (error set on failure);
// finish_training → collective_done once every rank has finished.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <cstdint>

#include "base/trace.hpp"
#include "pipeline/action.hpp"

namespace troupe {

struct SchedulerOptions {
  caf::actor stage;
  caf::actor data_loader;
  caf::actor comm_agent;
  pipeline::Program program;  ///< this rank's stage's actions for one step
  int64_t micro_count = 1;    ///< gradient accumulation steps: the program's micro-batches
  int64_t stages = 1;         ///< pp, for the step's bubble
  int64_t window = 8;         ///< actions handed to the stage and not finished, at most
  double fetch_timeout_s = 60;
  Tracer* tracer = nullptr;
};

caf::actor spawn_scheduler(caf::actor_system& system, SchedulerOptions options);

}  // namespace troupe
