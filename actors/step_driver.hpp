// The step driver (the "engine" actor of ARCHITECTURE.md): runs one global step at a
// time — fetches each micro-batch from the data loader, hands it to the stage, waits
// for the reduced gradients, has the stage apply the optimizer, and reports.
//
// Protocol (actors/protocol/engine.hpp): train_step → step_report (error set on
// failure); finish_training → collective_done once every rank has finished.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <cstdint>

#include "base/trace.hpp"

namespace troupe {

struct StepDriverOptions {
  caf::actor stage;
  caf::actor data_loader;
  caf::actor comm_agent;
  int64_t micro_count = 1;  ///< gradient accumulation steps
  int64_t dp = 1;
  double fetch_timeout_s = 60;
  Tracer* tracer = nullptr;
};

caf::actor spawn_step_driver(caf::actor_system& system, StepDriverOptions options);

}  // namespace troupe
