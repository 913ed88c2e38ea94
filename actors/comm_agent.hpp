// The comm agent: the one actor of a rank that owns the transport (and through it the
// UCX worker). Other actors ask it for collectives with messages carrying buffer
// handles; the transport's progress thread runs them and the outcome returns to the
// requester as collective_done. Protocol: actors/protocol/comm.hpp.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <memory>

#include "base/trace.hpp"
#include "transport/transport.hpp"

namespace troupe {

/// The agent owns `transport` and closes it when the agent terminates.
caf::actor spawn_comm_agent(caf::actor_system& system, std::shared_ptr<Transport> transport, Tracer* tracer);

}  // namespace troupe
