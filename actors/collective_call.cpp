// The comm agent's requests as the device collectives actors run them (protocol/device_comm.hpp).
#include "actors/protocol/device_comm.hpp"

#include <caf/message.hpp>

#include <utility>

namespace troupe {

const char* name_of(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_reduce:
      return "all_reduce";
    case CollectiveKind::reduce_scatter:
      return "reduce_scatter";
    case CollectiveKind::all_gather:
      return "all_gather";
    case CollectiveKind::broadcast:
      return "broadcast";
  }
  return "collective";
}

CollectiveCall call_of(all_reduce_request& r) {
  const std::size_t count = r.buffer.count;
  return CollectiveCall{r.tag,  CollectiveKind::all_reduce, r.buffer, std::move(r.buffer), count, r.op, 0,
                        r.comm, std::move(r.reply_to)};
}

CollectiveCall call_of(reduce_scatter_request& r) {
  const std::size_t count = r.output.count;
  return CollectiveCall{
      r.tag,  CollectiveKind::reduce_scatter, std::move(r.input), std::move(r.output), count, r.op, 0,
      r.comm, std::move(r.reply_to)};
}

CollectiveCall call_of(all_gather_request& r) {
  const std::size_t count = r.input.count;
  return CollectiveCall{
      r.tag,  CollectiveKind::all_gather, std::move(r.input), std::move(r.output), count, ReduceOp::sum, 0,
      r.comm, std::move(r.reply_to)};
}

CollectiveCall call_of(broadcast_request& r) {
  const std::size_t count = r.buffer.count;
  return CollectiveCall{
      r.tag,  CollectiveKind::broadcast, r.buffer, std::move(r.buffer), count, ReduceOp::sum, r.root,
      r.comm, std::move(r.reply_to)};
}

caf::message request_of(const CollectiveCall& c) {
  switch (c.kind) {
    case CollectiveKind::all_reduce:
      return caf::make_message(all_reduce_request{c.tag, c.output, c.op, c.comm, c.reply_to});
    case CollectiveKind::reduce_scatter:
      return caf::make_message(reduce_scatter_request{c.tag, c.input, c.output, c.op, c.comm, c.reply_to});
    case CollectiveKind::all_gather:
      return caf::make_message(all_gather_request{c.tag, c.input, c.output, c.comm, c.reply_to});
    case CollectiveKind::broadcast:
      return caf::make_message(broadcast_request{c.tag, c.output, c.root, c.comm, c.reply_to});
  }
  return {};
}

bool on_host(const CollectiveCall& c) {
  return c.input.owner && c.output.owner && c.input.placement().on_host() && c.output.placement().on_host();
}

}  // namespace troupe
