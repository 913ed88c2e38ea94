#include "actors/device_comm.hpp"

#include <caf/all.hpp>

#include <map>

#include <fmt/format.h>

#include "actors/protocol/comm.hpp"
#include "actors/protocol/device_comm.hpp"

namespace troupe {
namespace {

struct Pending {
  uint64_t tag = 0;
  caf::actor reply_to;
  std::shared_ptr<void> keep;
};

struct DeviceCommState {
  std::map<uint64_t, Pending> pending;  // by serial: issued, not yet run by the GPU
  uint64_t next_serial = 0;
  std::shared_ptr<NcclGroup> group;
  std::shared_ptr<CudaStream> stream;  // after the group: destroyed (and drained) first
  static inline const char* name = "device_comm";

  // Collectives still in flight when the actor goes (a lost peer, a failed job) may spin
  // on the GPU forever: abort them first, so the comm stream drains and the group goes.
  ~DeviceCommState() {
    if (!pending.empty() && group) group->abort();
  }
};
using DeviceComm = caf::stateful_actor<DeviceCommState>;

const char* name_of(DeviceCollective kind) {
  switch (kind) {
    case DeviceCollective::all_reduce:
      return "all_reduce";
    case DeviceCollective::reduce_scatter:
      return "reduce_scatter";
    case DeviceCollective::all_gather:
      return "all_gather";
    case DeviceCollective::broadcast:
      return "broadcast";
  }
  return "collective";
}

Status launch(NcclGroup& group, const device_collective_request& r, void* stream) {
  switch (r.kind) {
    case DeviceCollective::all_reduce:
      return group.all_reduce(r.output, r.count, r.type, r.op, stream);
    case DeviceCollective::reduce_scatter:
      return group.reduce_scatter(r.input, r.output, r.count, r.type, r.op, stream);
    case DeviceCollective::all_gather:
      return group.all_gather(r.input, r.output, r.count, r.type, stream);
    case DeviceCollective::broadcast:
      return group.broadcast(r.output, r.count, r.type, r.root, stream);
  }
  return make_error("an unknown device collective");
}

void issue(DeviceComm* self, device_collective_request& r) {
  auto& s = self->state;
  s.stream->wait(r.ready);
  auto launched = std::make_shared<Status>();
  std::string label = fmt::format("nccl {} {} B", name_of(r.kind), r.count * element_bytes(r.type));
  s.stream->enqueue(label, [&] { *launched = launch(*s.group, r, s.stream->native()); });
  if (!*launched) {
    caf::anon_send(r.reply_to, collective_done{r.tag, launched->error().message});
    return;
  }
  uint64_t serial = s.next_serial++;
  s.pending[serial] = Pending{r.tag, r.reply_to, std::move(r.keep)};
  // On the driver's callback thread: a message of one number to a weak handle, nothing else.
  s.stream->record().on_complete([me = caf::actor_cast<caf::weak_actor_ptr>(self), serial] {
    if (auto strong = me.lock())
      caf::anon_send(caf::actor_cast<caf::actor>(strong), device_collective_finished{serial});
  });
}

caf::behavior device_comm_behavior(DeviceComm* self, std::shared_ptr<NcclGroup> group,
                                   std::shared_ptr<CudaStream> stream) {
  self->state.group = std::move(group);
  self->state.stream = std::move(stream);
  return {
      [=](device_collective_request& r) { issue(self, r); },
      [=](device_collective_finished& f) {
        auto it = self->state.pending.find(f.serial);
        if (it == self->state.pending.end()) return;
        Pending done = std::move(it->second);
        self->state.pending.erase(it);
        done.keep.reset();  // the device memory may go before the requester hears of it
        self->send(done.reply_to, collective_done{done.tag, ""});
      },
  };
}

}  // namespace

caf::actor spawn_device_comm(caf::actor_system& system, std::unique_ptr<NcclGroup> group,
                             std::unique_ptr<CudaStream> stream) {
  // Detached: a non-blocking communicator may answer "in progress" while it enqueues, and
  // the group polls until it settles; that wait gets a thread of its own, not the scheduler's.
  return system.spawn<caf::detached>(device_comm_behavior, std::shared_ptr<NcclGroup>(std::move(group)),
                                     std::shared_ptr<CudaStream>(std::move(stream)));
}

}  // namespace troupe
