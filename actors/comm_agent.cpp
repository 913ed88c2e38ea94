#include "actors/comm_agent.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/envelope.hpp"
#include "actors/protocol/comm.hpp"

namespace troupe {

// The local actors other ranks may address, by (role, index). The agent registers them;
// the transport's progress thread delivers arriving messages straight to them (one
// thread hop fewer per message than through the agent), so it is shared and locked. The
// transport can outlive the agent and its actor system (a caller may hold it), so the
// agent closes the registry when it ends: frames arriving later are dropped, and so are
// couriers' messages.
class Registry {
 public:
  explicit Registry(caf::actor_system& system) : system_(&system) {}
  // The actors go too: they belong to a system that may end before the transport does.
  void close() {
    std::map<std::pair<std::string, int64_t>, caf::actor> gone;
    std::lock_guard lock(mutex_);
    system_ = nullptr;
    gone.swap(actors_);  // released after the lock, by `gone`'s destructor
  }
  // On the progress thread: opens the frame and delivers its message.
  void deliver_frame(int64_t from, const std::vector<uint8_t>& bytes) const {
    std::lock_guard lock(mutex_);
    if (system_ == nullptr) return;
    auto envelope = unpack_envelope(*system_, bytes);
    if (!envelope)
      return spdlog::warn("comm_agent: dropped a message from rank {}: {}", from, envelope.error().message);
    deliver_locked(envelope->role, envelope->index, std::move(envelope->message), from);
  }
  void deliver(const std::string& role, int64_t index, caf::message message, int64_t from) const {
    std::lock_guard lock(mutex_);
    deliver_locked(role, index, std::move(message), from);
  }
  // The frame of a message for another rank (packed with this system's serializer).
  Result<std::vector<uint8_t>> pack(const std::string& role, int64_t index, caf::message message) const {
    std::lock_guard lock(mutex_);
    if (system_ == nullptr) return make_error("the comm agent has ended");
    return pack_envelope(*system_, Envelope{role, index, std::move(message)});
  }
  void add(std::string role, int64_t index, caf::actor actor) {
    std::lock_guard lock(mutex_);
    actors_[{std::move(role), index}] = std::move(actor);
  }

 private:
  void deliver_locked(const std::string& role, int64_t index, caf::message message, int64_t from) const {
    auto it = actors_.find({role, index});
    if (it == actors_.end())
      return spdlog::warn("comm_agent: dropped a message from rank {} for {}[{}]: no such actor here", from,
                          role, index);
    caf::anon_send(it->second, std::move(message));
  }

  mutable std::mutex mutex_;
  caf::actor_system* system_;  // null once the agent has ended
  std::map<std::pair<std::string, int64_t>, caf::actor> actors_;
};

Courier::Courier(std::shared_ptr<Registry> registry, std::weak_ptr<Transport> transport)
    : registry_(std::move(registry)), transport_(std::move(transport)) {}

bool Courier::send(int64_t rank, const std::string& role, int64_t index, caf::message message) const {
  std::shared_ptr<Transport> transport = transport_.lock();
  if (!registry_ || !transport) return false;
  if (rank == transport->rank()) {
    registry_->deliver(role, index, std::move(message), rank);
    return true;
  }
  auto bytes = registry_->pack(role, index, std::move(message));
  if (!bytes) {
    spdlog::warn("comm_agent: message for {}[{}] on rank {} not sent: {}", role, index, rank,
                 bytes.error().message);
    return false;
  }
  transport->post_message(rank, std::move(*bytes), [rank, role](Status status) {
    if (!status)
      spdlog::warn("comm_agent: message for {} on rank {} not sent: {}", role, rank, status.error().message);
  });
  return true;
}

namespace {

// Buffers of collectives that failed: the transport may still touch them until it is
// closed (it waits a bounded time for transfers in flight), so they live as long as it.
class FailedBuffers {
 public:
  void keep(std::shared_ptr<Buffer> buffer) {
    std::lock_guard lock(mutex_);
    buffers_.push_back(std::move(buffer));
  }

 private:
  std::mutex mutex_;
  std::vector<std::shared_ptr<Buffer>> buffers_;
};

/// Internal: a span's writer the agent waited for is done.
struct writer_done {};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, writer_done& x) {
  return f(caf::meta::type_name("writer_done"), x);
}

// Requests go to the transport in the order they arrived, each once its spans' writers
// are done (BufferSpan::ready): one whose bytes are not whole yet holds back those after
// it, so every rank still issues its collectives in the order its actors asked. Waiting
// is a callback on the event that messages the agent, never a blocked thread.
class InOrderGate {
 public:
  using Wake = std::function<void()>;

  void submit(std::vector<Event> writers, std::function<void()> issue, const Wake& wake) {
    held_.push_back(Held{std::move(writers), std::move(issue)});
    release(wake);
  }

  // Issues the held requests whose writers are done, in order; arms the first that waits.
  void release(const Wake& wake) {
    while (!held_.empty()) {
      Held& head = held_.front();
      auto waiting =
          std::find_if(head.writers.begin(), head.writers.end(), [](const Event& e) { return !e.done(); });
      if (waiting != head.writers.end()) {
        if (!armed_) waiting->on_complete(wake);
        armed_ = true;
        return;
      }
      std::function<void()> issue = std::move(head.issue);
      held_.pop_front();
      issue();
    }
  }

  void woken() { armed_ = false; }

 private:
  struct Held {
    std::vector<Event> writers;
    std::function<void()> issue;
  };
  std::deque<Held> held_;
  bool armed_ = false;  // a callback will wake the agent for the head's writer
};

struct CommAgentState {
  InOrderGate gate;
  std::shared_ptr<FailedBuffers> failed_buffers = std::make_shared<FailedBuffers>();  // outlives transport
  std::shared_ptr<Transport> transport;
  Tracer* tracer = nullptr;
  std::shared_ptr<Registry> registry;
  Courier courier;  // the agent's own remote_sends take the same path
  static inline const char* name = "comm_agent";
};
using CommAgent = caf::stateful_actor<CommAgentState>;

// Completion on the transport's progress thread: post the outcome (the transport traces the
// collective itself, from when its bytes moved).
// A buffer the transport is done with is let go before the requester hears of it, so
// memory the requester frees next (a gathered row in ZeRO stage 3) really is freed;
// after a failure the transport may still touch it, so it is kept until the transport closes.
using Buffers = std::vector<std::shared_ptr<Buffer>>;

void let_go(Status status, Buffers& buffers, FailedBuffers& failed) {
  for (auto& buffer : buffers)
    if (!status.ok() && buffer) failed.keep(std::move(buffer));
  buffers.clear();
}

// The buffer handles of a request, moved out of it into the completion's list. Never
// `Buffers{std::move(a.owner), ...}`: a braced list is a std::initializer_list, whose
// elements the vector can only copy, and those copies live on this agent's thread until
// the end of the full-expression, after the transport call. By then the collective may
// have completed on the progress thread, let its handles go and told the requester,
// which frees the buffer next: with this thread descheduled, a gathered ZeRO stage-3
// row outlived its release and one extra row showed in the step's memory peak.
Buffers take(BufferSpan& span) {
  Buffers buffers;
  buffers.push_back(std::move(span.owner));
  return buffers;
}

Buffers take(BufferSpan& first, BufferSpan& second) {
  Buffers buffers = take(first);
  buffers.push_back(std::move(second.owner));
  return buffers;
}

Completion reply(caf::actor to, uint64_t tag, Buffers keep, std::shared_ptr<FailedBuffers> failed) {
  return [=, keep = std::move(keep)](Status status) mutable {
    let_go(status, keep, *failed);
    caf::anon_send(to, collective_done{tag, status.ok() ? std::string() : status.error().message});
  };
}

// Each request's buffer handles move into the completion (pointers are taken first),
// which is made before the transport is called: neither the request message nor anything
// on this agent's thread may keep a buffer alive once the collective can complete, even
// while this thread is descheduled (see take()).
void issue_all_reduce(CommAgent* self, all_reduce_request& r) {
  Tracer::Scope span(self->state.tracer, "comm_agent", "all_reduce_request");
  void* data = r.buffer.data();
  Completion done = reply(r.reply_to, r.tag, take(r.buffer), self->state.failed_buffers);
  self->state.transport->all_reduce(data, r.buffer.count, r.buffer.type, r.op, std::move(done), r.comm);
}

void issue_reduce_scatter(CommAgent* self, reduce_scatter_request& r) {
  Tracer::Scope span(self->state.tracer, "comm_agent", "reduce_scatter_request");
  const void* input = r.input.data();
  void* output = r.output.data();
  Completion done = reply(r.reply_to, r.tag, take(r.input, r.output), self->state.failed_buffers);
  self->state.transport->reduce_scatter(input, output, r.output.count, r.output.type, r.op, std::move(done),
                                        r.comm);
}

void issue_all_gather(CommAgent* self, all_gather_request& r) {
  Tracer::Scope span(self->state.tracer, "comm_agent", "all_gather_request");
  const void* input = r.input.data();
  void* output = r.output.data();
  Completion done = reply(r.reply_to, r.tag, take(r.input, r.output), self->state.failed_buffers);
  self->state.transport->all_gather(input, output, r.input.count, r.input.type, std::move(done), r.comm);
}

void issue_broadcast(CommAgent* self, broadcast_request& r) {
  Tracer::Scope span(self->state.tracer, "comm_agent", "broadcast_request");
  void* data = r.buffer.data();
  Completion done = reply(r.reply_to, r.tag, take(r.buffer), self->state.failed_buffers);
  self->state.transport->broadcast(data, r.buffer.count, r.buffer.type, r.root, std::move(done), r.comm);
}

void issue_send(CommAgent* self, send_request& r) {
  Tracer::Scope span(self->state.tracer, "comm_agent", "send_request");
  const void* data = r.buffer.data();
  std::size_t bytes = r.buffer.bytes();
  Completion done = reply(r.reply_to, r.tag, take(r.buffer), self->state.failed_buffers);
  if (r.key)
    self->state.transport->send_keyed(data, bytes, r.peer, *r.key, std::move(done));
  else
    self->state.transport->send(data, bytes, r.peer, std::move(done));
}

void issue_recv(CommAgent* self, recv_request& r) {
  Tracer::Scope span(self->state.tracer, "comm_agent", "recv_request");
  void* data = r.buffer.data();
  std::size_t bytes = r.buffer.bytes();
  Completion done = reply(r.reply_to, r.tag, take(r.buffer), self->state.failed_buffers);
  if (r.arrival)
    done = [done = std::move(done), arrival = std::move(r.arrival)](Status status) mutable {
      arrival->ok = status.ok();
      arrival->arrived.complete();
      done(std::move(status));
    };
  if (r.key)
    self->state.transport->recv_keyed(data, bytes, r.peer, *r.key, std::move(done));
  else
    self->state.transport->recv(data, bytes, r.peer, std::move(done));
}

std::vector<const BufferSpan*> spans_of(const all_reduce_request& r) {
  return {&r.buffer};
}
std::vector<const BufferSpan*> spans_of(const broadcast_request& r) {
  return {&r.buffer};
}
std::vector<const BufferSpan*> spans_of(const send_request& r) {
  return {&r.buffer};
}
std::vector<const BufferSpan*> spans_of(const recv_request& r) {
  return {&r.buffer};
}
std::vector<const BufferSpan*> spans_of(const reduce_scatter_request& r) {
  return {&r.input, &r.output};
}
std::vector<const BufferSpan*> spans_of(const all_gather_request& r) {
  return {&r.input, &r.output};
}

InOrderGate::Wake wake(CommAgent* self) {
  return [me = caf::actor_cast<caf::weak_actor_ptr>(self)] {
    if (auto strong = me.lock()) caf::anon_send(caf::actor_cast<caf::actor>(strong), writer_done{});
  };
}

// The transport moves host memory: a span in device memory is refused (a GPU rank's
// device collectives actor takes those); the rest go through the gate, in order.
template <class Request>
void submit(CommAgent* self, Request r, void (*issue)(CommAgent*, Request&)) {
  std::vector<Event> writers;
  for (const BufferSpan* span : spans_of(r)) {
    if (!span->owner) continue;
    if (!span->placement().on_host()) {
      std::string error = fmt::format(
          "the comm agent moves host memory; a span of request {:#x} is in {} memory (device spans go to the "
          "rank's device collectives)",
          r.tag, describe(span->placement()));
      const caf::actor to = std::move(r.reply_to);
      const uint64_t tag = r.tag;
      r = Request{};  // the buffers go before the requester hears
      return self->send(to, collective_done{tag, std::move(error)});
    }
    writers.push_back(span->ready);
  }
  self->state.gate.submit(
      std::move(writers), [self, r = std::move(r), issue]() mutable { issue(self, r); }, wake(self));
}

caf::behavior comm_agent_behavior(CommAgent* self, std::shared_ptr<Transport> transport, Tracer* tracer,
                                  std::shared_ptr<Registry> registry) {
  self->state.transport = std::move(transport);
  self->state.tracer = tracer;
  self->state.registry = std::move(registry);
  self->state.courier = Courier(self->state.registry, self->state.transport);
  self->state.transport->on_message(
      [registry = self->state.registry](int64_t from, std::vector<uint8_t> bytes) {
        registry->deliver_frame(from, bytes);
      });
  self->attach_functor([registry = self->state.registry] { registry->close(); });
  return {
      [=](register_actor& r) {
        self->state.registry->add(std::move(r.role), r.index, std::move(r.actor));
        return collective_done{0, ""};
      },
      [=](remote_send& r) {
        Tracer::Scope span(tracer, "comm_agent", "remote_send");
        self->state.courier.send(r.rank, r.role, r.index, std::move(r.message));
      },
      [=](all_reduce_request& r) { submit(self, std::move(r), issue_all_reduce); },
      [=](reduce_scatter_request& r) { submit(self, std::move(r), issue_reduce_scatter); },
      [=](all_gather_request& r) { submit(self, std::move(r), issue_all_gather); },
      [=](broadcast_request& r) { submit(self, std::move(r), issue_broadcast); },
      [=](send_request& r) { submit(self, std::move(r), issue_send); },
      [=](recv_request& r) { submit(self, std::move(r), issue_recv); },
      [=](writer_done&) {
        self->state.gate.woken();
        self->state.gate.release(wake(self));
      },
      // In line with the other collectives: a barrier is one of the world's, in order.
      [=](barrier_request& r) {
        self->state.gate.submit(
            {},
            [self, r = std::move(r)] {
              Tracer::Scope span(self->state.tracer, "comm_agent", "barrier_request");
              self->state.transport->barrier(reply(r.reply_to, r.tag, {}, self->state.failed_buffers));
            },
            wake(self));
      },
      [=](abort_request& r) { self->state.transport->abort(r.reason); },
  };
}

}  // namespace

caf::actor spawn_comm_agent(caf::actor_system& system, std::shared_ptr<Transport> transport, Tracer* tracer,
                            Courier* courier) {
  // The registry is made here, not in the agent, so the courier exists before the
  // agent's first message is handled.
  auto registry = std::make_shared<Registry>(system);
  if (courier) *courier = Courier(registry, transport);
  return system.spawn(comm_agent_behavior, std::move(transport), tracer, std::move(registry));
}

}  // namespace troupe
