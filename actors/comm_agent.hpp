// The comm agent: the one actor of a rank that owns the transport (and through it the
// UCX worker). Other actors ask it for collectives with messages carrying buffer
// handles; the transport's progress thread runs them and the outcome returns to the
// requester as collective_done. Protocol: actors/protocol/comm.hpp.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/message.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "base/trace.hpp"
#include "transport/transport.hpp"

namespace troupe {

class Registry;  // the actors of this rank other ranks may address (comm_agent.cpp)

/// Sends actor messages to (rank, role, index) from the calling thread. A remote_send
/// through the agent crosses the agent's mailbox, a thread wake-up on each side of the
/// wire; the courier packs the envelope where the sender runs and hands the frame to the
/// transport's progress thread itself, and the receiving rank's progress thread delivers
/// it to the addressed actor. Messages for this rank go to the registered actor directly.
/// Once the agent has ended, messages are dropped with a warning (the courier does not keep
/// the transport alive: the agent owns it).
/// Thread safety: any thread; copies share one registry and transport.
class Courier {
 public:
  Courier() = default;
  Courier(std::shared_ptr<Registry> registry, std::weak_ptr<Transport> transport);
  /// The message may hold only types the actor systems can serialize; false when it
  /// cannot go (no courier, agent ended, not serializable: said in a warning).
  bool send(int64_t rank, const std::string& role, int64_t index, caf::message message) const;
  explicit operator bool() const { return registry_ != nullptr; }

 private:
  std::shared_ptr<Registry> registry_;
  std::weak_ptr<Transport> transport_;
};

/// The agent owns `transport` and closes it when the agent terminates. `courier`, when
/// given, receives the courier of this agent's rank.
caf::actor spawn_comm_agent(caf::actor_system& system, std::shared_ptr<Transport> transport, Tracer* tracer,
                            Courier* courier = nullptr);

}  // namespace troupe
