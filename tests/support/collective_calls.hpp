// Asking an actor for one collective and waiting (bounded) for its collective_done, and
// building device collective requests: what the comm-agent and staged-comm tests share.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <optional>

#include "actors/protocol/comm.hpp"
#include "actors/protocol/device_comm.hpp"

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

/// A sum over `count` fp32 values from `input` into `output` (root 0 for a broadcast).
inline device_collective_request device_request(uint64_t tag, DeviceCollective kind, const float* input,
                                                float* output, std::size_t count, int root = 0) {
  device_collective_request r;
  r.tag = tag;
  r.kind = kind;
  r.input = input;
  r.output = output;
  r.count = count;
  r.op = ReduceOp::sum;
  r.root = root;
  return r;
}

}  // namespace troupe::testing
