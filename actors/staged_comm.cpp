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

struct Staged {
  CollectiveCall call;
  CommunicatorPlace place;  // this rank's in the call's communicator
  // Size × count elements for the gathers and scatters, else count; null for a request
  // on host memory, which goes to the comm agent as it is, in line.
  std::shared_ptr<HostBuffer> staging;
};

struct StagedCommState {
  StagedCommOptions options;
  std::map<uint64_t, Staged> pending;                            // by serial
  std::multimap<std::size_t, std::shared_ptr<HostBuffer>> idle;  // by bytes
  uint64_t next_serial = 0;
  static inline const char* name = "staged_comm";
};
using StagedComm = caf::stateful_actor<StagedCommState>;

std::size_t element(const CollectiveCall& c) {
  return element_bytes(c.type());
}

// Whether the host buffer holds every rank's block (reduce-scatter input, all-gather output).
bool whole_world(CollectiveKind kind) {
  return kind == CollectiveKind::reduce_scatter || kind == CollectiveKind::all_gather;
}

std::size_t my_block(const CommunicatorPlace& place, const CollectiveCall& c) {
  return static_cast<std::size_t>(place.position) * c.count * element(c);
}

// A staging buffer, page-locked once (when the options can) and used again by later
// requests of its size: a GPU rank stages the same row sizes every step.
std::shared_ptr<HostBuffer> take_staging(StagedCommState& s, std::size_t bytes) {
  if (auto it = s.idle.find(bytes); it != s.idle.end()) {
    auto reused = std::move(it->second);
    s.idle.erase(it);
    return reused;
  }
  auto fresh = std::make_shared<HostBuffer>(bytes, s.options.ledger, MemoryKind::communication);
  if (s.options.pin) {
    // Pageable memory still copies correctly, only synchronously and slower: go on.
    if (auto pinned = s.options.pin(fresh->data(), bytes))
      fresh->hold_page_lock(std::move(*pinned));
    else
      spdlog::warn("staged collectives: a staging buffer stays pageable: {}", pinned.error().message);
  }
  return fresh;
}

void stage_out(StagedComm* self, CollectiveCall c) {
  auto& s = self->state;
  const CommunicatorPlace place = s.options.places(c.comm);
  if (place.position < 0 || place.position >= place.size)
    return answer_now(self, c,
                      fmt::format("staged collectives: this rank is not a member of communicator {}, "
                                  "which this {} named",
                                  c.comm, name_of(c.kind)));
  uint64_t serial = s.next_serial++;
  if (on_host(c)) {  // its place in line: after the copies out of the requests before it
    s.options.d2h->notify(s.options.d2h->record(), caf::actor_cast<caf::actor>(self),
                          caf::make_message(staged_out{serial}));
    s.pending.emplace(serial, Staged{std::move(c), place, nullptr});
    return;
  }
  std::size_t blocks = whole_world(c.kind) ? static_cast<std::size_t>(place.size) : 1;
  auto staging = take_staging(s, blocks * c.count * element(c));
  std::byte* into = staging->data() + (c.kind == CollectiveKind::all_gather ? my_block(place, c) : 0);
  std::size_t bytes = (c.kind == CollectiveKind::reduce_scatter ? blocks : 1) * c.count * element(c);
  s.options.d2h->wait(c.input.ready);
  s.options.d2h->wait(c.output.ready);
  s.options.d2h->copy(into, c.input.data(), bytes, fmt::format("stage out {}", serial));
  s.options.d2h->notify(s.options.d2h->record(), caf::actor_cast<caf::actor>(self),
                        caf::make_message(staged_out{serial}));
  s.pending.emplace(serial, Staged{std::move(c), place, std::move(staging)});
}

// The host collective over the staging buffer; the comm agent answers with the serial.
void reduce_on_host(StagedComm* self, uint64_t serial) {
  auto& s = self->state;
  Staged& st = s.pending.at(serial);
  const CollectiveCall& c = st.call;
  caf::actor me = caf::actor_cast<caf::actor>(self);
  if (!st.staging) {
    CollectiveCall as_is = c;
    as_is.tag = serial;
    as_is.reply_to = me;
    return self->send(s.options.comm_agent, request_of(as_is));
  }
  auto span = [&](std::size_t offset_bytes, std::size_t count) {
    return BufferSpan{st.staging, offset_bytes, count, c.type()};
  };
  std::size_t all = static_cast<std::size_t>(st.place.size) * c.count;
  const std::size_t mine = my_block(st.place, c);
  switch (c.kind) {
    case CollectiveKind::all_reduce:
      return self->send(s.options.comm_agent, all_reduce_request{serial, span(0, c.count), c.op, c.comm, me});
    case CollectiveKind::reduce_scatter:
      return self->send(s.options.comm_agent,
                        reduce_scatter_request{serial, span(0, all), span(mine, c.count), c.op, c.comm, me});
    case CollectiveKind::all_gather:
      return self->send(s.options.comm_agent,
                        all_gather_request{serial, span(mine, c.count), span(0, all), c.comm, me});
    case CollectiveKind::broadcast:
      return self->send(s.options.comm_agent,
                        broadcast_request{serial, span(0, c.count), c.root, c.comm, me});
  }
}

void stage_in(StagedComm* self, uint64_t serial) {
  auto& s = self->state;
  Staged& st = s.pending.at(serial);
  const CollectiveCall& c = st.call;
  const std::byte* from =
      st.staging->data() + (c.kind == CollectiveKind::reduce_scatter ? my_block(st.place, c) : 0);
  std::size_t bytes = (c.kind == CollectiveKind::all_gather ? static_cast<std::size_t>(st.place.size) : 1) *
                      c.count * element(c);
  s.options.h2d->copy(c.output.data(), from, bytes, fmt::format("stage in {}", serial));
  s.options.h2d->notify(s.options.h2d->record(), caf::actor_cast<caf::actor>(self),
                        caf::make_message(staged_in{serial}));
}

void finish(StagedComm* self, uint64_t serial, const std::string& error) {
  auto& s = self->state;
  auto it = s.pending.find(serial);
  if (it == s.pending.end()) return;
  Staged done = std::move(it->second);
  s.pending.erase(it);
  caf::actor to = std::move(done.call.reply_to);
  uint64_t tag = done.call.tag;
  done.call = CollectiveCall{};  // what the request's spans held goes before the reply
  // After a failed host collective the transport may still write into the staging buffer
  // (the comm agent keeps it until the transport closes): it is not used again.
  if (error.empty() && done.staging) {
    std::size_t bytes = done.staging->bytes();
    s.idle.emplace(bytes, std::move(done.staging));
  }
  done.staging.reset();
  self->send(to, collective_done{tag, error});
}

caf::behavior staged_comm_behavior(StagedComm* self, StagedCommOptions options) {
  self->state.options = std::move(options);
  return {
      [=](all_reduce_request& r) { stage_out(self, call_of(r)); },
      [=](reduce_scatter_request& r) { stage_out(self, call_of(r)); },
      [=](all_gather_request& r) { stage_out(self, call_of(r)); },
      [=](broadcast_request& r) { stage_out(self, call_of(r)); },
      [=](staged_out& o) { reduce_on_host(self, o.serial); },
      [=](collective_done& d) {
        if (!d.error.empty()) return finish(self, d.tag, "staged collective: " + d.error);
        auto it = self->state.pending.find(d.tag);
        if (it != self->state.pending.end() && !it->second.staging) return finish(self, d.tag, "");
        stage_in(self, d.tag);
      },
      [=](staged_in& i) { finish(self, i.serial, ""); },
  };
}

}  // namespace

CommunicatorPlaces communicator_places(std::weak_ptr<const Transport> transport) {
  return [transport = std::move(transport)](CommunicatorId comm) {
    auto t = transport.lock();
    return t ? CommunicatorPlace{t->position_in(comm), t->size_of(comm)} : CommunicatorPlace{};
  };
}

CommunicatorPlaces world_place(int64_t rank, int64_t world) {
  return [rank, world](CommunicatorId comm) {
    return comm == world_communicator ? CommunicatorPlace{rank, world} : CommunicatorPlace{};
  };
}

caf::actor spawn_staged_comm(caf::actor_system& system, StagedCommOptions options) {
  // Detached: issuing a copy may block (pageable memory), so it gets a thread of its own
  // rather than one of the scheduler's.
  return system.spawn<caf::detached>(staged_comm_behavior, std::move(options));
}

}  // namespace troupe
