#include "actors/staged_comm.hpp"

#include <caf/all.hpp>

#include <map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/protocol/comm.hpp"
#include "actors/protocol/device_comm.hpp"

namespace troupe {
namespace {

/// Internal: request `serial`'s input is in its staging buffer.
struct staged_out {
  uint64_t serial = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, staged_out& x) {
  return f(caf::meta::type_name("staged_out"), x.serial);
}

/// Internal: request `serial`'s result is back where the requester wants it.
struct staged_in {
  uint64_t serial = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, staged_in& x) {
  return f(caf::meta::type_name("staged_in"), x.serial);
}

// A staging buffer, page-locked once (when the options can) and used again by later
// requests of its size: a GPU rank stages the same row sizes every step.
struct StagingBuffer {
  std::shared_ptr<HostBuffer> host;
  std::shared_ptr<void> pinned;  // after the buffer: unpinned before it goes
};

struct Staged {
  device_collective_request request;
  StagingBuffer staging;  // size × count elements for the gathers and scatters, else count
};

struct StagedCommState {
  StagedCommOptions options;
  std::map<uint64_t, Staged> pending;              // by serial
  std::multimap<std::size_t, StagingBuffer> idle;  // by bytes
  uint64_t next_serial = 0;
  static inline const char* name = "staged_comm";
};
using StagedComm = caf::stateful_actor<StagedCommState>;

std::size_t element(const device_collective_request& r) {
  return element_bytes(r.type);
}

// Whether the host buffer holds every rank's block (reduce-scatter input, all-gather output).
bool whole_world(DeviceCollective kind) {
  return kind == DeviceCollective::reduce_scatter || kind == DeviceCollective::all_gather;
}

std::size_t my_block(const StagedCommState& s, const device_collective_request& r) {
  return static_cast<std::size_t>(s.options.rank) * r.count * element(r);
}

StagingBuffer take_staging(StagedCommState& s, std::size_t bytes) {
  if (auto it = s.idle.find(bytes); it != s.idle.end()) {
    StagingBuffer reused = std::move(it->second);
    s.idle.erase(it);
    return reused;
  }
  StagingBuffer fresh{std::make_shared<HostBuffer>(bytes, s.options.ledger, MemoryKind::communication),
                      nullptr};
  if (s.options.pin) {
    // Pageable memory still copies correctly, only synchronously and slower: go on.
    if (auto pinned = s.options.pin(fresh.host->data(), bytes))
      fresh.pinned = std::move(*pinned);
    else
      spdlog::warn("staged collectives: a staging buffer stays pageable: {}", pinned.error().message);
  }
  return fresh;
}

void stage_out(StagedComm* self, device_collective_request& r) {
  auto& s = self->state;
  uint64_t serial = s.next_serial++;
  std::size_t blocks = whole_world(r.kind) ? static_cast<std::size_t>(s.options.size) : 1;
  StagingBuffer staging = take_staging(s, blocks * r.count * element(r));
  std::byte* into = staging.host->data() + (r.kind == DeviceCollective::all_gather ? my_block(s, r) : 0);
  const void* from =
      r.kind == DeviceCollective::all_reduce || r.kind == DeviceCollective::broadcast ? r.output : r.input;
  std::size_t bytes = (r.kind == DeviceCollective::reduce_scatter ? blocks : 1) * r.count * element(r);
  s.options.d2h->wait(r.ready);
  s.options.d2h->copy(into, from, bytes, fmt::format("stage out {}", serial));
  s.options.d2h->notify(s.options.d2h->record(), caf::actor_cast<caf::actor>(self),
                        caf::make_message(staged_out{serial}));
  s.pending.emplace(serial, Staged{std::move(r), std::move(staging)});
}

// The host collective over the staging buffer; the comm agent answers with the serial.
void reduce_on_host(StagedComm* self, uint64_t serial) {
  auto& s = self->state;
  Staged& st = s.pending.at(serial);
  const device_collective_request& r = st.request;
  caf::actor me = caf::actor_cast<caf::actor>(self);
  auto span = [&](std::size_t offset_bytes, std::size_t count) {
    return BufferSpan{st.staging.host, offset_bytes, count, r.type};
  };
  std::size_t all = static_cast<std::size_t>(s.options.size) * r.count;
  switch (r.kind) {
    case DeviceCollective::all_reduce:
      return self->send(s.options.comm_agent,
                        all_reduce_request{serial, span(0, r.count), r.op, world_communicator, me});
    case DeviceCollective::reduce_scatter:
      return self->send(s.options.comm_agent,
                        reduce_scatter_request{serial, span(0, all), span(my_block(s, r), r.count), r.op,
                                               world_communicator, me});
    case DeviceCollective::all_gather:
      return self->send(s.options.comm_agent, all_gather_request{serial, span(my_block(s, r), r.count),
                                                                 span(0, all), world_communicator, me});
    case DeviceCollective::broadcast:
      return self->send(s.options.comm_agent,
                        broadcast_request{serial, span(0, r.count), r.root, world_communicator, me});
  }
}

void stage_in(StagedComm* self, uint64_t serial) {
  auto& s = self->state;
  Staged& st = s.pending.at(serial);
  const device_collective_request& r = st.request;
  const std::byte* from =
      st.staging.host->data() + (r.kind == DeviceCollective::reduce_scatter ? my_block(s, r) : 0);
  std::size_t bytes =
      (r.kind == DeviceCollective::all_gather ? static_cast<std::size_t>(s.options.size) : 1) * r.count *
      element(r);
  s.options.h2d->copy(r.output, from, bytes, fmt::format("stage in {}", serial));
  s.options.h2d->notify(s.options.h2d->record(), caf::actor_cast<caf::actor>(self),
                        caf::make_message(staged_in{serial}));
}

void finish(StagedComm* self, uint64_t serial, const std::string& error) {
  auto& s = self->state;
  auto it = s.pending.find(serial);
  if (it == s.pending.end()) return;
  Staged done = std::move(it->second);
  s.pending.erase(it);
  caf::actor to = done.request.reply_to;
  uint64_t tag = done.request.tag;
  done.request = device_collective_request{};  // what the request kept goes before the reply
  std::size_t bytes = done.staging.host->bytes();
  s.idle.emplace(bytes, std::move(done.staging));
  self->send(to, collective_done{tag, error});
}

caf::behavior staged_comm_behavior(StagedComm* self, StagedCommOptions options) {
  self->state.options = std::move(options);
  return {
      [=](device_collective_request& r) { stage_out(self, r); },
      [=](staged_out& o) { reduce_on_host(self, o.serial); },
      [=](collective_done& d) {
        if (!d.error.empty()) return finish(self, d.tag, "staged collective: " + d.error);
        stage_in(self, d.tag);
      },
      [=](staged_in& i) { finish(self, i.serial, ""); },
  };
}

}  // namespace

caf::actor spawn_staged_comm(caf::actor_system& system, StagedCommOptions options) {
  // Detached: issuing a copy may block (pageable memory), so it gets a thread of its own
  // rather than one of the scheduler's.
  return system.spawn<caf::detached>(staged_comm_behavior, std::move(options));
}

}  // namespace troupe
