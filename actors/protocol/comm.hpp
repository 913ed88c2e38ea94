// Messages of the comm agent: collectives requested by other actors of this rank.
// Every request names the actor that hears the outcome (reply_to) and a tag the
// requester chooses to recognise it; tensor bytes travel as buffer handles. The same
// requests go to a GPU rank's device collectives actor (NCCL, or staged through host
// memory: actors/device_comm.hpp, actors/staged_comm.hpp) when their spans are in device
// memory: one protocol for every memory.
#pragma once

#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/message.hpp>
#include <caf/meta/type_name.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/stream.hpp"
#include "memory/buffer.hpp"
#include "memory/host_buffer.hpp"
#include "transport/collective.hpp"
#include "transport/transport.hpp"

namespace troupe {

/// `count` elements of `type` starting `offset_bytes` into a shared buffer, in whatever
/// memory the buffer is (owner->placement()), and when its bytes are whole: `ready`
/// completes once the last writer has written them (work on a device stream, say). Whoever
/// reads the span — a collective, a copy, a kernel — waits for `ready` on its own stream
/// first; a span written before it is handed over carries a completed event.
struct BufferSpan {
  std::shared_ptr<Buffer> owner;
  std::size_t offset_bytes = 0;
  std::size_t count = 0;
  DataType type = DataType::f32;
  Event ready = Event::completed();
  std::byte* data() const { return owner->data() + offset_bytes; }
  std::size_t bytes() const { return count * element_bytes(type); }
  Placement placement() const { return owner->placement(); }
};

/// `count` fp32 values starting `offset` values into `owner`.
inline BufferSpan float_span(std::shared_ptr<Buffer> owner, std::size_t offset, std::size_t count) {
  return BufferSpan{std::move(owner), offset * sizeof(float), count, DataType::f32};
}

/// `count` values of `type` starting `offset` values into `owner`.
inline BufferSpan typed_span(std::shared_ptr<Buffer> owner, std::size_t offset, std::size_t count,
                             DataType type) {
  return BufferSpan{std::move(owner), offset * element_bytes(type), count, type};
}

/// Reduce `buffer` in place across the members of `comm`; answered with collective_done.
struct all_reduce_request {
  uint64_t tag = 0;
  BufferSpan buffer;
  ReduceOp op = ReduceOp::average;
  CommunicatorId comm = world_communicator;
  caf::actor reply_to;
};

/// Reduce-scatter on `comm`: `input` holds one block of output.count elements per member.
struct reduce_scatter_request {
  uint64_t tag = 0;
  BufferSpan input;
  BufferSpan output;
  ReduceOp op = ReduceOp::sum;
  CommunicatorId comm = world_communicator;
  caf::actor reply_to;
};

/// All-gather on `comm`: every member's input (input.count elements) lands in its block of `output`.
struct all_gather_request {
  uint64_t tag = 0;
  BufferSpan input;
  BufferSpan output;
  CommunicatorId comm = world_communicator;
  caf::actor reply_to;
};

/// Broadcast on `comm` from the member at position `root`, in place.
struct broadcast_request {
  uint64_t tag = 0;
  BufferSpan buffer;
  int64_t root = 0;
  CommunicatorId comm = world_communicator;
  caf::actor reply_to;
};

/// Point to point: `buffer`'s bytes to world rank `peer`, answered with collective_done
/// once the buffer may be reused. Sends to a peer match its recv_requests from this rank
/// in the order each side issued them, and the byte counts must agree (a mismatch fails
/// both). Pipeline stages move activations and their gradients this way.
struct send_request {
  uint64_t tag = 0;
  BufferSpan buffer;
  int64_t peer = 0;
  caf::actor reply_to;
  /// Set: matched by key instead of by order (Transport::send_keyed).
  std::optional<uint64_t> key;
};

/// A receive's end as work on a stream can wait for it: completed on the transport's
/// progress thread as the receive ends (`ok` says whether its bytes are in), before the
/// requester hears collective_done. Work queued on a stream behind a wait for it starts
/// as the bytes land, without a hop through the requesting actor.
struct ReceiveArrival {
  Event arrived;
  std::atomic<bool> ok{false};
};

/// Point to point: the next bytes world rank `peer` sends this rank land in `buffer`;
/// answered with collective_done once they have.
struct recv_request {
  uint64_t tag = 0;
  BufferSpan buffer;
  int64_t peer = 0;
  caf::actor reply_to;
  /// Set: matched by key instead of by order (Transport::recv_keyed).
  std::optional<uint64_t> key;
  /// Set: completed as the receive ends, before reply_to hears of it.
  std::shared_ptr<ReceiveArrival> arrival = nullptr;
};

/// Completes when every rank has entered; answered with collective_done.
struct barrier_request {
  uint64_t tag = 0;
  caf::actor reply_to;
};

/// Outcome of a collective: error is empty on success.
struct collective_done {
  uint64_t tag = 0;
  std::string error;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, collective_done& x) {
  return f(caf::meta::type_name("collective_done"), x.tag, x.error);
}

/// Stop the job on every rank, saying why.
struct abort_request {
  std::string reason;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, abort_request& x) {
  return f(caf::meta::type_name("abort_request"), x.reason);
}

/// Registers `actor` under (role, index) on this rank, so that messages other ranks
/// address there reach it; answered with collective_done (tag 0) once registered.
struct register_actor {
  std::string role;
  int64_t index = 0;
  caf::actor actor;
};

/// Delivers `message` to the actor registered as (role, index) on `rank`. The message
/// travels serialized: it may hold only types the actor systems can serialize.
struct remote_send {
  int64_t rank = 0;
  std::string role;
  int64_t index = 0;
  caf::message message;
};

}  // namespace troupe

// Requests hold buffer handles and actor handles: in-process only, never serialized.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::all_reduce_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::barrier_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::reduce_scatter_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::all_gather_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::broadcast_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::send_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::recv_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::register_actor)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::remote_send)
