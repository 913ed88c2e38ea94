#include "actors/device_comm.hpp"

#include <caf/all.hpp>

#include <map>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "actors/protocol/comm.hpp"
#include "actors/protocol/device_comm.hpp"

namespace troupe {
namespace {

// What a call in flight holds: its spans keep the device memory it reads and writes.
struct Pending {
  uint64_t tag = 0;
  caf::actor reply_to;
  BufferSpan input, output;
};

struct DeviceCommState {
  std::map<uint64_t, Pending> pending;  // by serial: issued, not yet run by the GPU
  uint64_t next_serial = 0;
  caf::actor comm_agent;  // host spans' collectives, passed on in arrival order
  std::map<CommunicatorId, std::shared_ptr<NcclGroup>> groups;
  std::shared_ptr<CudaStream> stream;  // after the groups: destroyed (and drained) first
  static inline const char* name = "device_comm";

  // Collectives still in flight when the actor goes (a lost peer, a failed job) may spin
  // on the GPU forever: abort them first, so the comm stream drains and the groups go.
  ~DeviceCommState() {
    if (pending.empty()) return;
    for (auto& [comm, group] : groups) group->abort();
  }
};
using DeviceComm = caf::stateful_actor<DeviceCommState>;

Status launch(NcclGroup& group, const CollectiveCall& c, void* stream) {
  switch (c.kind) {
    case CollectiveKind::all_reduce:
      return group.all_reduce(c.output.data(), c.count, c.type(), c.op, stream);
    case CollectiveKind::reduce_scatter:
      return group.reduce_scatter(c.input.data(), c.output.data(), c.count, c.type(), c.op, stream);
    case CollectiveKind::all_gather:
      return group.all_gather(c.input.data(), c.output.data(), c.count, c.type(), stream);
    case CollectiveKind::broadcast:
      return group.broadcast(c.output.data(), c.count, c.type(), static_cast<int>(c.root), stream);
  }
  return make_error("an unknown device collective");
}

// Why NCCL cannot run `c` here, or nothing.
std::optional<std::string> refusal(const DeviceCommState& s, const CollectiveCall& c) {
  for (const BufferSpan* span : {&c.input, &c.output})
    if (!span->owner)
      return fmt::format("this {} has a span without a buffer", name_of(c.kind));
    else if (span->placement().space != MemorySpace::device)
      return fmt::format(
          "NCCL runs collectives on device memory; this {} has a span in {} memory (a "
          "collective on host memory goes to the comm agent, one with a span in each is not run)",
          name_of(c.kind), describe(span->placement()));
  if (!s.groups.count(c.comm))
    return fmt::format("this rank has no NCCL group for communicator {}, which this {} named", c.comm,
                       name_of(c.kind));
  return std::nullopt;
}

void issue(DeviceComm* self, CollectiveCall c) {
  auto& s = self->state;
  // The comm agent's (its own sequence over UCX, apart from NCCL's): as they came.
  if (on_host(c)) return self->send(s.comm_agent, request_of(c));
  if (auto refused = refusal(s, c)) return answer_now(self, c, std::move(*refused));
  NcclGroup& group = *s.groups.at(c.comm);
  s.stream->wait(c.input.ready);  // on the device: NCCL starts once their writers are done
  s.stream->wait(c.output.ready);
  auto launched = std::make_shared<Status>();
  std::string label = fmt::format("nccl {} {} B", name_of(c.kind), c.count * element_bytes(c.type()));
  s.stream->enqueue(label, [&] { *launched = launch(group, c, s.stream->native()); });
  if (!*launched) return answer_now(self, c, launched->error().message);  // nothing was enqueued
  uint64_t serial = s.next_serial++;
  s.pending[serial] = Pending{c.tag, std::move(c.reply_to), std::move(c.input), std::move(c.output)};
  // On the driver's callback thread: a message of one number to a weak handle, nothing else.
  s.stream->record().on_complete([me = caf::actor_cast<caf::weak_actor_ptr>(self), serial] {
    if (auto strong = me.lock())
      caf::anon_send(caf::actor_cast<caf::actor>(strong), device_collective_finished{serial});
  });
}

caf::behavior device_comm_behavior(DeviceComm* self, caf::actor comm_agent,
                                   std::map<CommunicatorId, std::shared_ptr<NcclGroup>> groups,
                                   std::shared_ptr<CudaStream> stream) {
  self->state.comm_agent = std::move(comm_agent);
  self->state.groups = std::move(groups);
  self->state.stream = std::move(stream);
  return {
      [=](all_reduce_request& r) { issue(self, call_of(r)); },
      [=](reduce_scatter_request& r) { issue(self, call_of(r)); },
      [=](all_gather_request& r) { issue(self, call_of(r)); },
      [=](broadcast_request& r) { issue(self, call_of(r)); },
      [=](device_collective_finished& f) {
        auto it = self->state.pending.find(f.serial);
        if (it == self->state.pending.end()) return;
        Pending done = std::move(it->second);
        self->state.pending.erase(it);
        done.input = done.output = BufferSpan{};  // the device memory may go before the reply
        self->send(done.reply_to, collective_done{done.tag, ""});
      },
  };
}

}  // namespace

caf::actor spawn_device_comm(caf::actor_system& system, caf::actor comm_agent, NcclGroups groups,
                             std::unique_ptr<CudaStream> stream) {
  std::map<CommunicatorId, std::shared_ptr<NcclGroup>> shared;
  for (auto& [comm, group] : groups) shared.emplace(comm, std::move(group));
  // Detached: a non-blocking communicator may answer "in progress" while it enqueues, and
  // the group polls until it settles; that wait gets a thread of its own, not the scheduler's.
  return system.spawn<caf::detached>(device_comm_behavior, std::move(comm_agent), std::move(shared),
                                     std::shared_ptr<CudaStream>(std::move(stream)));
}

caf::actor spawn_device_comm(caf::actor_system& system, caf::actor comm_agent,
                             std::unique_ptr<NcclGroup> group, std::unique_ptr<CudaStream> stream) {
  NcclGroups groups;
  groups.emplace(world_communicator, std::move(group));
  return spawn_device_comm(system, std::move(comm_agent), std::move(groups), std::move(stream));
}

}  // namespace troupe
