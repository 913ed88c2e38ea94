#include "actors/comm_agent.hpp"

#include <caf/all.hpp>

#include <fmt/format.h>

#include "actors/protocol/comm.hpp"

namespace troupe {
namespace {

struct CommAgentState {
  std::shared_ptr<Transport> transport;
  Tracer* tracer = nullptr;
  static inline const char* name = "comm_agent";
};
using CommAgent = caf::stateful_actor<CommAgentState>;

// Completion on the transport's progress thread: record the span, post the outcome.
Completion reply(Tracer* tracer, std::string label, caf::actor to, uint64_t tag,
                 std::shared_ptr<HostBuffer> keep) {
  int64_t start_us = tracer ? Tracer::now_us() : 0;
  return [=, keep = std::move(keep)](Status status) {
    if (tracer) tracer->span("comm", label, start_us, Tracer::now_us());
    caf::anon_send(to, collective_done{tag, status.ok() ? std::string() : status.error().message});
  };
}

caf::behavior comm_agent_behavior(CommAgent* self, std::shared_ptr<Transport> transport, Tracer* tracer) {
  self->state.transport = std::move(transport);
  self->state.tracer = tracer;
  return {
      [=](all_reduce_request& r) {
        Tracer::Scope span(tracer, "comm_agent", "all_reduce_request");
        auto label = fmt::format("all_reduce {} B", r.buffer.count * sizeof(float));
        self->state.transport->all_reduce(r.buffer.data(), r.buffer.count, r.op,
                                          reply(tracer, std::move(label), r.reply_to, r.tag, r.buffer.owner));
      },
      [=](barrier_request& r) {
        Tracer::Scope span(tracer, "comm_agent", "barrier_request");
        self->state.transport->barrier(reply(tracer, "barrier", r.reply_to, r.tag, nullptr));
      },
      [=](abort_request& r) { self->state.transport->abort(r.reason); },
  };
}

}  // namespace

caf::actor spawn_comm_agent(caf::actor_system& system, std::shared_ptr<Transport> transport, Tracer* tracer) {
  return system.spawn(comm_agent_behavior, std::move(transport), tracer);
}

}  // namespace troupe
