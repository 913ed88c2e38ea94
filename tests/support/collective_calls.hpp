// Asking an actor for one collective and waiting (bounded) for its collective_done, and
// building requests on device spans: what the comm-agent and staged-comm tests share.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <optional>

#include "actors/protocol/comm.hpp"
#include "actors/protocol/device_comm.hpp"
#include "memory/buffer.hpp"

namespace troupe::testing {

/// Sends `request` (reply_to set here) to `to`; the collective_done that answers it, or
/// nothing within `bound`.
template <class Request>
std::optional<collective_done> ask(caf::actor_system& system, const caf::actor& to, Request request,
                                   std::chrono::seconds bound = std::chrono::seconds(10)) {
  caf::scoped_actor self{system};
  request.reply_to = caf::actor{self};
  self->send(to, std::move(request));
  std::optional<collective_done> reply;
  self->receive([&](collective_done& d) { reply = std::move(d); }, caf::after(bound) >> [] {});
  return reply;
}

/// The answer's tag; -1 for no answer, -2 for an error.
inline int64_t tag_of(const std::optional<collective_done>& reply) {
  if (!reply) return -1;
  return reply->error.empty() ? static_cast<int64_t>(reply->tag) : -2;
}

/// `count` fp32 values at `data`, which the span does not own (`keep` is held with it),
/// placed in device 0's memory: how a device collectives actor sees a GPU's memory. The
/// bytes may be host memory: the staged actor only copies them on its streams.
inline BufferSpan device_span(const float* data, std::size_t count, std::shared_ptr<void> keep = nullptr) {
  auto view = std::make_shared<ViewBuffer>(const_cast<float*>(data), count * sizeof(float),
                                           Placement::on_device(0), std::move(keep));
  return float_span(std::move(view), 0, count);
}

/// A sum over `count` fp32 values from `input` into `output` (root 0 for a broadcast) on
/// device spans, sent as the comm agent's request of `kind` (send_device_request).
/// `count` is one member's block, as the device actors read it. `ready`: the input's
/// writer; `keep`: held by the spans.
struct DeviceRequest {
  uint64_t tag = 0;
  CollectiveKind kind = CollectiveKind::all_reduce;
  BufferSpan input, output;
  int64_t root = 0;
  CommunicatorId comm = world_communicator;
};

inline DeviceRequest device_request(uint64_t tag, CollectiveKind kind, const float* input, float* output,
                                    std::size_t count, int64_t root = 0, std::shared_ptr<void> keep = nullptr,
                                    Event ready = Event::completed()) {
  DeviceRequest r{tag, kind, device_span(input, count, keep), device_span(output, count, keep), root};
  r.input.ready = std::move(ready);
  return r;
}

/// Sends `d` to `to` as the request of its kind, from `self`.
inline void send_device_request(caf::scoped_actor& self, const caf::actor& to, DeviceRequest d) {
  caf::actor me{self};
  switch (d.kind) {
    case CollectiveKind::all_reduce:
      return self->send(to, all_reduce_request{d.tag, std::move(d.input), ReduceOp::sum, d.comm, me});
    case CollectiveKind::reduce_scatter:
      return self->send(to, reduce_scatter_request{d.tag, std::move(d.input), std::move(d.output),
                                                   ReduceOp::sum, d.comm, me});
    case CollectiveKind::all_gather:
      return self->send(to, all_gather_request{d.tag, std::move(d.input), std::move(d.output), d.comm, me});
    case CollectiveKind::broadcast:
      return self->send(to, broadcast_request{d.tag, std::move(d.input), d.root, d.comm, me});
  }
}

/// ask() for a DeviceRequest.
inline std::optional<collective_done> ask(caf::actor_system& system, const caf::actor& to,
                                          DeviceRequest request,
                                          std::chrono::seconds bound = std::chrono::seconds(10)) {
  caf::scoped_actor self{system};
  send_device_request(self, to, std::move(request));
  std::optional<collective_done> reply;
  self->receive([&](collective_done& d) { reply = std::move(d); }, caf::after(bound) >> [] {});
  return reply;
}

}  // namespace troupe::testing
