// Messages of the device comm actor (actors/device_comm.hpp): collectives on GPU memory.
#pragma once

#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>

#include <cstdint>
#include <memory>

#include "actors/stream.hpp"
#include "kernels/cpu/reduce.hpp"
#include "transport/collective.hpp"

namespace troupe {

enum class DeviceCollective : uint8_t { all_reduce, reduce_scatter, all_gather, broadcast };

/// A collective over device memory, run with NCCL on the rank's comm stream after `ready`
/// (an Event of the stream that produced the input) completes, on the device. Answered
/// with collective_done{tag, error} once the comm stream has run it; `keep` (the owner of
/// the device memory) is let go just before, on the actor's thread. Shapes as Transport's: reduce_scatter's
/// input holds group-size blocks of `count`, all_gather's output too.
struct device_collective_request {
  uint64_t tag = 0;
  DeviceCollective kind = DeviceCollective::all_reduce;
  const void* input = nullptr;
  void* output = nullptr;  ///< all_reduce and broadcast: in place (output == input)
  std::size_t count = 0;
  DataType type = DataType::f32;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  Event ready = Event::completed();  ///< the default: nothing to wait for
  std::shared_ptr<void> keep;
  caf::actor reply_to;
};

/// Internal: the comm stream ran the request the actor numbered `serial`. Only the number
/// travels: the host callback that sees the completion must make no CUDA call, so what the
/// request kept (device memory) stays in the actor's state and is let go on its thread.
struct device_collective_finished {
  uint64_t serial = 0;
};

}  // namespace troupe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::device_collective_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::device_collective_finished)
