// The simulated cluster's services besides its stages, each an actor on the virtual clock:
//   collectives: the data-parallel groups' gradient reductions and parameter gathers. A
//     collective starts once every member has joined and each one's data is ready, and
//     takes the link model's time for its group (hierarchical across hosts); a member of a
//     lost link or a dead rank stops the job after the peer timeout, as the runtime does;
//   comm agent: what the scheduler actors ask of the world (the step's sums gathered over
//     every rank, the finishing barrier), with the bytes really gathered;
//   data loader: micro-batches ready at once (the runtime's loader prepares them ahead).
// Thread safety: actors; the world is the simulator's one thread's.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <cstdint>

namespace troupe::sim {

struct World;

caf::actor spawn_collectives(caf::actor_system& system, World& world);
/// `schedulers`: every rank's scheduler actor, by rank (set once they are spawned).
caf::actor spawn_world_comm(caf::actor_system& system, World& world,
                            const std::vector<caf::actor>* schedulers);
caf::actor spawn_sim_data_loader(caf::actor_system& system, World& world);

}  // namespace troupe::sim
