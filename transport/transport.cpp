#include "transport/transport_impl.hpp"

#include <future>

namespace troupe {

// ---- the public face ---------------------------------------------------------------

Result<std::unique_ptr<Transport>> Transport::make(const TransportOptions& options) {
  auto worker = UcxWorker::make(options.peer_timeout_s);
  if (!worker) return worker.error();
  auto table = bootstrap(**worker, options);
  if (!table) return table.error();
  auto impl = std::make_unique<Impl>(options, std::move(*worker));
  TROUPE_TRY(impl->connect(*table));
  impl->start();
  std::unique_ptr<Transport> transport(new Transport(std::move(impl)));
  // The first barrier proves every endpoint carries data before anyone relies on it.
  Status ready = transport->barrier_sync();
  if (!ready) return make_error("connecting to the other ranks: " + ready.error().message);
  // Every rank has passed connect() (its handlers registered) once the barrier is done:
  // only now may heartbeats go, or one could reach a rank with no handler for it yet.
  transport->impl_->submit([impl = transport->impl_.get()] { impl->start_heartbeats(); });
  return transport;
}

Transport::Transport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Transport::~Transport() = default;

int64_t Transport::rank() const {
  return impl_->options().rank;
}
int64_t Transport::world_size() const {
  return impl_->options().world_size;
}
std::shared_ptr<const std::atomic<uint64_t>> Transport::bytes_sent() const {
  return impl_->bytes_sent();
}

void Transport::all_reduce(void* data, std::size_t count, DataType type, ReduceOp op, Completion done,
                           CommunicatorId comm) {
  impl_->submit([impl = impl_.get(), data, count, type, op, comm, done = std::move(done)]() mutable {
    bool small = count * element_bytes(type) <= small_all_reduce_bytes;
    if (!small && comm == world_communicator && impl->two_level_)
      return impl->issue_two_level_all_reduce(data, count, type, op, std::move(done));
    auto shape = impl->next_shape(comm, describe_call("all_reduce", type, count, 0, op));
    if (!shape) return done(shape.error());
    auto collective = small ? make_all_reduce_small(*shape, data, count, type, op)
                            : make_all_reduce(*shape, data, count, type, op);
    impl->issue(*shape, std::move(collective), std::move(done));
  });
}

void Transport::reduce_scatter(const void* input, void* output, std::size_t count, DataType type, ReduceOp op,
                               Completion done, CommunicatorId comm) {
  impl_->submit([impl = impl_.get(), input, output, count, type, op, comm, done = std::move(done)]() mutable {
    auto shape = impl->next_shape(comm, describe_call("reduce_scatter", type, count, 0, op));
    if (!shape) return done(shape.error());
    impl->issue(*shape, make_reduce_scatter(*shape, input, output, count, type, op), std::move(done));
  });
}

void Transport::all_gather(const void* input, void* output, std::size_t count, DataType type, Completion done,
                           CommunicatorId comm) {
  impl_->submit([impl = impl_.get(), input, output, count, type, comm, done = std::move(done)]() mutable {
    auto shape = impl->next_shape(comm, describe_call("all_gather", type, count, 0, ReduceOp::sum));
    if (!shape) return done(shape.error());
    std::size_t bytes = count * element_bytes(type);
    auto* own = static_cast<std::byte*>(output) + static_cast<std::size_t>(shape->rank) * bytes;
    if (input != own) std::memmove(own, input, bytes);  // out of place: start from this rank's block
    impl->issue(*shape, make_all_gather(*shape, output, count, type), std::move(done));
  });
}

void Transport::broadcast(void* data, std::size_t count, DataType type, int64_t root, Completion done,
                          CommunicatorId comm) {
  impl_->submit([impl = impl_.get(), data, count, type, root, comm, done = std::move(done)]() mutable {
    auto shape = impl->next_shape(comm, describe_call("broadcast", type, count, root, ReduceOp::sum));
    if (!shape) return done(shape.error());
    if (root < 0 || root >= shape->world_size)
      return done(
          make_error(fmt::format("broadcast from position {} of communicator {}: the root must be 0-{}", root,
                                 comm, shape->world_size - 1)));
    impl->issue(*shape, make_broadcast(*shape, data, count * element_bytes(type), root), std::move(done));
  });
}

void Transport::send(const void* data, std::size_t bytes, int64_t peer, Completion done) {
  impl_->submit([impl = impl_.get(), data, bytes, peer, done = std::move(done)]() mutable {
    if (auto ok = impl->check_peer(peer); !ok) return done(ok.error());
    auto [id, tag] = impl->next_point_to_point(peer, false);
    impl->issue(id, make_send(id, peer, data, bytes, tag), std::move(done));
  });
}

void Transport::recv(void* data, std::size_t bytes, int64_t peer, Completion done) {
  impl_->submit([impl = impl_.get(), data, bytes, peer, done = std::move(done)]() mutable {
    if (auto ok = impl->check_peer(peer); !ok) return done(ok.error());
    auto [id, tag] = impl->next_point_to_point(peer, true);
    impl->issue_receive(id, make_recv(id, peer, data, bytes, tag), std::move(done));
  });
}

void Transport::send_keyed(const void* data, std::size_t bytes, int64_t peer, uint64_t key, Completion done) {
  impl_->submit([impl = impl_.get(), data, bytes, peer, key, done = std::move(done)]() mutable {
    if (auto ok = impl->check_peer(peer); !ok) return done(ok.error());
    if (key >= point_to_point_keys)
      return done(make_error(fmt::format("point-to-point key {} out of range", key)));
    const uint64_t id = impl->next_operation_id();
    impl->issue(id, make_send(id, peer, data, bytes, point_to_point_key_tag(key, impl->rank())),
                std::move(done));
  });
}

void Transport::recv_keyed(void* data, std::size_t bytes, int64_t peer, uint64_t key, Completion done) {
  impl_->submit([impl = impl_.get(), data, bytes, peer, key, done = std::move(done)]() mutable {
    if (auto ok = impl->check_peer(peer); !ok) return done(ok.error());
    if (key >= point_to_point_keys)
      return done(make_error(fmt::format("point-to-point key {} out of range", key)));
    const uint64_t id = impl->next_operation_id();
    impl->issue_receive(id, make_recv(id, peer, data, bytes, point_to_point_key_tag(key, peer)),
                        std::move(done));
  });
}

void Transport::barrier(Completion done, CommunicatorId comm) {
  impl_->submit([impl = impl_.get(), comm, done = std::move(done)]() mutable {
    // An all-reduce cannot finish on any rank before every rank has contributed: that
    // is a barrier. The collective is made
    // before `word` moves into the operation that keeps it alive.
    auto probe = impl->next_shape(comm, describe_call("barrier", DataType::f32, 0, 0, ReduceOp::sum));
    if (!probe) return done(probe.error());
    std::vector<float> word(static_cast<std::size_t>(probe->world_size), 0.0f);
    auto collective = make_all_reduce_small(*probe, word.data(), word.size(), DataType::f32, ReduceOp::sum);
    impl->issue(*probe, std::move(collective), std::move(done), std::move(word));
  });
}

Result<CommunicatorId> Transport::make_communicator(const std::vector<int64_t>& members) {
  int64_t n = world_size();
  std::vector<int64_t> seen;
  for (int64_t m : members) {
    if (m < 0 || m >= n)
      return make_error(fmt::format("communicator member {} is not a rank (0-{})", m, n - 1));
    if (std::find(seen.begin(), seen.end(), m) != seen.end())
      return make_error(fmt::format("communicator lists rank {} twice", m));
    seen.push_back(m);
  }
  if (members.empty()) return make_error("a communicator needs at least one member");
  if (impl_->communicator_count() >= communicators_max)
    return make_error(fmt::format("at most {} communicators", communicators_max));
  // Every rank must agree on the list: gather each rank's digest of it and compare.
  uint64_t digest = 1469598103934665603ull;
  for (int64_t m : members) digest = (digest ^ static_cast<uint64_t>(m)) * 1099511628211ull;
  std::vector<uint64_t> digests(static_cast<std::size_t>(n));
  TROUPE_TRY(all_gather_sync(&digest, digests.data(), 2, DataType::f32));  // moved as raw bits
  for (int64_t r = 0; r < n; ++r)
    if (digests[static_cast<std::size_t>(r)] != digest)
      return make_error(
          fmt::format("rank {} asked for a communicator with other members than rank {} did; "
                      "every rank must pass the same list",
                      r, rank()));
  auto promise = std::make_shared<std::promise<CommunicatorId>>();
  auto future = promise->get_future();
  impl_->submit(
      [impl = impl_.get(), members, promise] { promise->set_value(impl->add_communicator(members)); });
  return future.get();
}

int64_t Transport::position_in(CommunicatorId comm) const {
  return impl_->position_in(comm);
}

int64_t Transport::size_of(CommunicatorId comm) const {
  return impl_->size_of(comm);
}

void Transport::on_message(MessageHandler handler) {
  impl_->submit([impl = impl_.get(), handler = std::move(handler)]() mutable {
    impl->set_message_handler(std::move(handler));
  });
}

void Transport::post_message(int64_t peer, std::vector<uint8_t> bytes, Completion done) {
  impl_->submit([impl = impl_.get(), peer, bytes = std::move(bytes), done = std::move(done)]() mutable {
    impl->send_message(peer, std::move(bytes), std::move(done));
  });
}
bool Transport::two_level() const {
  return impl_->two_level_.has_value();
}

void Transport::abort(const std::string& reason) {
  impl_->submit([impl = impl_.get(), reason] { impl->abort_now(reason); });
}

namespace {
Status wait_for(const std::function<void(Completion)>& start, double timeout_s) {
  auto promise = std::make_shared<std::promise<Status>>();
  auto future = promise->get_future();
  start([promise](Status s) { promise->set_value(std::move(s)); });
  if (future.wait_for(std::chrono::duration<double>(timeout_s)) != std::future_status::ready)
    return make_error(fmt::format("no completion within {} s", timeout_s));
  return future.get();
}
}  // namespace

double Transport::sync_timeout_s() const {
  return impl_->options().collective_timeout_s + 10;
}

Status Transport::all_reduce_sync(void* data, std::size_t count, DataType type, ReduceOp op,
                                  CommunicatorId comm) {
  return wait_for([&](Completion c) { all_reduce(data, count, type, op, std::move(c), comm); },
                  sync_timeout_s());
}

Status Transport::reduce_scatter_sync(const void* input, void* output, std::size_t count, DataType type,
                                      ReduceOp op, CommunicatorId comm) {
  return wait_for([&](Completion c) { reduce_scatter(input, output, count, type, op, std::move(c), comm); },
                  sync_timeout_s());
}

Status Transport::all_gather_sync(const void* input, void* output, std::size_t count, DataType type,
                                  CommunicatorId comm) {
  return wait_for([&](Completion c) { all_gather(input, output, count, type, std::move(c), comm); },
                  sync_timeout_s());
}

Status Transport::broadcast_sync(void* data, std::size_t count, DataType type, int64_t root,
                                 CommunicatorId comm) {
  return wait_for([&](Completion c) { broadcast(data, count, type, root, std::move(c), comm); },
                  sync_timeout_s());
}

Status Transport::send_sync(const void* data, std::size_t bytes, int64_t peer) {
  return wait_for([&](Completion c) { send(data, bytes, peer, std::move(c)); }, sync_timeout_s());
}

Status Transport::recv_sync(void* data, std::size_t bytes, int64_t peer) {
  return wait_for([&](Completion c) { recv(data, bytes, peer, std::move(c)); }, sync_timeout_s());
}

Status Transport::barrier_sync(CommunicatorId comm) {
  return wait_for([&](Completion c) { barrier(std::move(c), comm); }, sync_timeout_s());
}

}  // namespace troupe
