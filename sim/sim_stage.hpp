// The stage actor of a simulated rank: it answers the real scheduler actor
// (actors/scheduler.hpp) with the stage protocol (actors/protocol/pipeline.hpp,
// protocol/stage.hpp) as a stage of that rank would, by the same rules (actors/stage/
// flow.cpp): actions taken in program order, each started once what it needs is there;
// receives posted ahead while fewer than two of a neighbour's wait; a chunk's compute on
// the rank's one stream. What would run LibTorch or move bytes instead takes its cost on
// the virtual clock: computes on the rank's stream (the host's shared processors), a
// transfer over the link model, the gradient reduction and the parameter gather as
// collectives of the data-parallel group (services.hpp). Activations are charged to the
// rank's ledger between a micro-batch's forward and its backward.
// Thread safety: an actor; the world is the simulator's one thread's.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <cstdint>

namespace troupe::sim {

struct World;

/// Chunk `chunk` of `rank`; `collectives` runs the data-parallel group's collectives.
caf::actor spawn_sim_stage(caf::actor_system& system, World& world, int64_t rank, int64_t chunk,
                           caf::actor collectives);

}  // namespace troupe::sim
