// What the device collectives actors (actors/device_comm.hpp: NCCL; actors/staged_comm.hpp:
// staged through host memory) make of the comm agent's requests (actors/protocol/comm.hpp)
// when their spans are in device memory: the same four collectives, normalised into one
// call, so each actor has one path for all of them.
#pragma once

#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>

#include <cstdint>
#include <string>
#include <utility>

#include "actors/protocol/comm.hpp"

namespace troupe {

enum class CollectiveKind : uint8_t { all_reduce, reduce_scatter, all_gather, broadcast };

const char* name_of(CollectiveKind kind);

/// One collective as a device actor runs it. Shapes as Transport's: `count` is the
/// elements of one member's block (reduce_scatter's input and all_gather's output hold
/// one block per member); all_reduce and broadcast work in place (input is output).
struct CollectiveCall {
  uint64_t tag = 0;
  CollectiveKind kind = CollectiveKind::all_reduce;
  BufferSpan input, output;
  std::size_t count = 0;
  ReduceOp op = ReduceOp::sum;
  int64_t root = 0;
  CommunicatorId comm = world_communicator;
  caf::actor reply_to;

  DataType type() const { return output.type; }
};

CollectiveCall call_of(all_reduce_request& r);
CollectiveCall call_of(reduce_scatter_request& r);
CollectiveCall call_of(all_gather_request& r);
CollectiveCall call_of(broadcast_request& r);
/// The request `c` was made from, with its tag and reply_to (for the comm agent).
caf::message request_of(const CollectiveCall& c);
/// Both of `c`'s spans are in host memory: the comm agent's to run, in line.
bool on_host(const CollectiveCall& c);

/// Answers `c` with `error` at once, from `self`: its spans are let go first, so memory the
/// requester frees next really is freed.
template <class Self>
void answer_now(Self* self, CollectiveCall& c, std::string error) {
  caf::actor to = std::move(c.reply_to);
  const uint64_t tag = c.tag;
  c = CollectiveCall{};
  self->send(to, collective_done{tag, std::move(error)});
}

/// Internal: the comm stream ran the call the actor numbered `serial`. Only the number
/// travels: the host callback that sees the completion must make no CUDA call, so what the
/// call holds (device memory) stays in the actor's state and is let go on its thread.
struct device_collective_finished {
  uint64_t serial = 0;
};

}  // namespace troupe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::device_collective_finished)
