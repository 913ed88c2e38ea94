#include "transport/transport.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kernels/cpu/reduce.hpp"
#include "transport/bootstrap.hpp"
#include "transport/ring.hpp"
#include "transport/ucx_worker.hpp"
#include "transport/wire.hpp"

namespace troupe {
namespace {
using Clock = std::chrono::steady_clock;
constexpr auto mismatch_probe_period = std::chrono::milliseconds(50);
constexpr std::size_t early_messages_max = 4096;  // actor messages kept until a handler is set
constexpr int busy_wait_ms = 1;           // longest sleep while operations are in flight
constexpr int idle_wait_ms = 100;         // longest sleep between deadline checks
constexpr double teardown_bound_s = 2.0;  // flush and cancel at shutdown or failure
}  // namespace

class Transport::Impl final : public TransferIo {
 public:
  Impl(const TransportOptions& options, std::unique_ptr<UcxWorker> worker)
      : options_(options), worker_(std::move(worker)) {}
  ~Impl() override { stop(); }

  Status connect(const AddressTable& table);
  void start() {
    thread_ = std::thread([this] { run(); });
  }
  void stop();
  void submit(std::function<void()> command);

  void issue(uint64_t key, std::unique_ptr<Collective> collective, Completion done,
             std::vector<float> owned = {}, CommunicatorId comm = world_communicator, uint64_t tag = 0);
  /// Issues a collective made for `shape` (its tag lets a mismatched peer be recognised).
  void issue(const CollectiveShape& shape, std::unique_ptr<Collective> collective, Completion done,
             std::vector<float> owned = {}) {
    issue(shape.key, std::move(collective), std::move(done), std::move(owned), shape.communicator,
          transfer_tag(shape, 0, 0, 0));
  }
  void abort_now(const std::string& reason);
  /// Set when all-reduce runs in two levels: this rank's host and cross-host communicators.
  struct TwoLevel {
    CommunicatorId local = 0;
    CommunicatorId cross = 0;
  };
  std::optional<TwoLevel> two_level_;
  void issue_two_level_all_reduce(void* data, std::size_t count, DataType type, ReduceOp op, Completion done);
  /// The shape of the next collective on `comm`, in issue order; an error when this
  /// rank is not a member or the communicator does not exist.
  Result<CollectiveShape> next_shape(CommunicatorId comm, uint64_t descriptor) {
    std::lock_guard<std::mutex> lock(communicators_mutex_);
    if (comm >= communicators_.size())
      return make_error(fmt::format("communicator {} does not exist on rank {}", comm, options_.rank));
    CommunicatorState& c = communicators_[comm];
    if (c.position < 0)
      return make_error(fmt::format("rank {} is not a member of communicator {}", options_.rank, comm));
    uint64_t sequence = c.next_sequence++;
    return CollectiveShape{sequence, comm << 48 | (sequence & ((uint64_t{1} << 48) - 1)), comm, descriptor,
                           c.position, static_cast<int64_t>(c.members.size()), options_.chunk_bytes,
                           options_.chunks_in_flight};
  }
  /// Registers a communicator every rank agreed on; returns its id.
  CommunicatorId add_communicator(std::vector<int64_t> members) {
    std::lock_guard<std::mutex> lock(communicators_mutex_);
    auto it = std::find(members.begin(), members.end(), options_.rank);
    int64_t position = it == members.end() ? -1 : it - members.begin();
    communicators_.push_back(CommunicatorState{std::move(members), position, 0});
    return communicators_.size() - 1;
  }
  int64_t position_in(CommunicatorId comm) const {
    std::lock_guard<std::mutex> lock(communicators_mutex_);
    return comm < communicators_.size() ? communicators_[comm].position : -1;
  }
  std::size_t communicator_count() const {
    std::lock_guard<std::mutex> lock(communicators_mutex_);
    return communicators_.size();
  }
  /// Identity and tag of the next point-to-point message to (send) or from (recv) `peer`.
  std::pair<uint64_t, uint64_t> next_point_to_point(int64_t peer, bool receive) {
    uint64_t& sequence = receive ? received_from_[peer] : sent_to_[peer];
    uint64_t tag = point_to_point_tag(sequence++, receive ? peer : options_.rank);
    return {point_to_point_ids_++, tag};
  }
  Status check_peer(int64_t peer) const {
    if (peer < 0 || peer >= options_.world_size || peer == options_.rank)
      return make_error(fmt::format("rank {} cannot exchange messages with rank {}: peers are 0-{} except itself",
                                    options_.rank, peer, options_.world_size - 1));
    return {};
  }

  void post_send(int64_t peer, const void* data, std::size_t bytes, uint64_t tag, uint64_t op,
                 uint64_t chunk) override;
  void post_recv(int64_t peer, void* data, std::size_t bytes, uint64_t tag, uint64_t op,
                 uint64_t chunk) override;

  const TransportOptions& options() const { return options_; }

 private:
  struct Transfer {
    Impl* self;
    uint64_t op;
    uint64_t chunk;
    int64_t peer;
    bool recv;
    uint64_t tag = 0;
    std::size_t bytes = 0;
    void* request = nullptr;
    ucs_status_t status = UCS_OK;
    uint64_t received_tag = 0;  // receives: what actually arrived
    std::size_t received_bytes = 0;
  };
  struct Operation {
    std::unique_ptr<Collective> collective;
    Completion done;
    Clock::time_point deadline;
    std::vector<float> owned;  // buffers the transport itself provides (barrier)
    CommunicatorId communicator = world_communicator;
    uint64_t tag = 0;          // of its first transfer: names the operation and the call
    Clock::time_point started = Clock::now();
  };
  struct PeerSlot {
    Impl* self;
    int64_t rank;
  };
  struct CommunicatorState {
    std::vector<int64_t> members;  // world ranks, by position
    int64_t position;              // this rank's, or -1
    uint64_t next_sequence;
  };
  /// The world rank of position `peer` in the communicator of operation `op`.
  int64_t world_rank_of(uint64_t op, int64_t peer) const {
    auto it = operations_.find(op);
    if (it == operations_.end() || it->second.communicator == world_communicator) return peer;
    std::lock_guard<std::mutex> lock(communicators_mutex_);
    return communicators_[it->second.communicator].members[static_cast<std::size_t>(peer)];
  }

  static void on_send(void* request, ucs_status_t status, void* user_data);
  static void on_recv(void* request, ucs_status_t status, const ucp_tag_recv_info_t*, void* user_data);
  static void on_peer_error(void* arg, ucp_ep_h, ucs_status_t status);
  static ucs_status_t on_actor_message(void* arg, const void* header, size_t header_bytes, void* data, size_t bytes,
                                       const ucp_am_recv_param_t* param);
  static ucs_status_t on_abort(void* arg, const void* header, size_t header_bytes, void* data, size_t bytes,
                               const ucp_am_recv_param_t*);

  void run();
  void track(Transfer* t, ucs_status_ptr_t request);
  /// Reacts to the transfers UCX finished; returns whether there were any.
  bool drain_finished();
  void check_deadlines();
  /// Whether a failure is passed on: not when a peer's own abort frame reported it.
  enum class Notify { peers, nobody };
  void fail_all(const Error& error, Notify notify);
  void tell_peers(const std::string& reason);
  void complete(uint64_t id, const Status& status);
  void close_endpoints();
  std::string waiting_on(uint64_t op) const;
  Status plan_topology(const std::vector<std::string>& hosts);
  void check_mismatches();
  Clock::time_point last_probe_ = Clock::now();
  std::string transfer_failure(const Transfer& t, const std::string& what) const;

  TransportOptions options_;
  std::unique_ptr<UcxWorker> worker_;
  std::vector<ucp_ep_h> endpoints_;
  std::vector<std::unique_ptr<PeerSlot>> slots_;

  mutable std::mutex communicators_mutex_;  // guards communicators_
  std::vector<CommunicatorState> communicators_;
  std::mutex mutex_;  // guards commands_ and stopping_
  std::vector<std::function<void()>> commands_;
  bool stopping_ = false;
  std::thread thread_;

  // Below: owned by the progress thread.
  uint64_t next_id_ = 0;
  uint64_t point_to_point_ids_ = uint64_t{1} << 63;  // operation ids apart from the collectives'
  std::map<int64_t, uint64_t> sent_to_, received_from_;
  std::map<uint64_t, Operation> operations_;
  std::unordered_set<Transfer*> in_flight_;
  std::vector<Transfer*> finished_;         // filled by UCX callbacks
  std::vector<std::string> peer_failures_;  // lost endpoints, filled by UCX callbacks
  std::vector<std::string> peer_aborts_;    // abort frames, filled by UCX callbacks

 public:
  MessageHandler message_handler_;  // set on the progress thread
  std::vector<std::pair<int64_t, std::vector<uint8_t>>> early_messages_;  // arrived before the handler
  void send_message(int64_t peer, std::vector<uint8_t> bytes, Completion done);

 private:
  std::optional<Error> failed_;
  bool closing_ = false;
};

// ---- set-up and teardown -------------------------------------------------------

Status Transport::Impl::connect(const AddressTable& table) {
  ucp_am_handler_param_t h{};
  h.field_mask =
      UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  h.id = static_cast<uint16_t>(wire::Kind::abort);
  h.cb = on_abort;
  h.arg = this;
  ucs_status_t s = ucp_worker_set_am_recv_handler(worker_->worker(), &h);
  if (s != UCS_OK) return ucx_error("registering the abort handler", s);
  h.id = static_cast<uint16_t>(wire::Kind::message);
  h.cb = on_actor_message;
  s = ucp_worker_set_am_recv_handler(worker_->worker(), &h);
  if (s != UCS_OK) return ucx_error("registering the message handler", s);

  std::vector<int64_t> everyone(static_cast<std::size_t>(options_.world_size));
  for (int64_t r = 0; r < options_.world_size; ++r) everyone[static_cast<std::size_t>(r)] = r;
  add_communicator(std::move(everyone));  // id 0: the world
  endpoints_.assign(options_.world_size, nullptr);
  for (int64_t peer = 0; peer < options_.world_size; ++peer) {
    if (peer == options_.rank) continue;
    slots_.push_back(std::make_unique<PeerSlot>(PeerSlot{this, peer}));
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                   UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    p.address = reinterpret_cast<const ucp_address_t*>(table.addresses[peer].data());
    p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    p.err_handler.cb = on_peer_error;
    p.err_handler.arg = slots_.back().get();
    s = ucp_ep_create(worker_->worker(), &p, &endpoints_[peer]);
    if (s != UCS_OK) return ucx_error(fmt::format("connecting to rank {}", peer), s);
  }
  return plan_topology(table.hosts);
}

// Groups the ranks by host. Every rank registers the same communicators in the same
// order — one per host, then one per local position across hosts — from the table that
// every rank received, so no agreement round is needed.
Status Transport::Impl::plan_topology(const std::vector<std::string>& hosts) {
  std::vector<std::string> order;
  std::vector<std::vector<int64_t>> ranks_of;
  for (int64_t r = 0; r < options_.world_size; ++r) {
    auto it = std::find(order.begin(), order.end(), hosts[static_cast<std::size_t>(r)]);
    if (it == order.end()) {
      order.push_back(hosts[static_cast<std::size_t>(r)]);
      ranks_of.emplace_back();
      it = order.end() - 1;
    }
    ranks_of[static_cast<std::size_t>(it - order.begin())].push_back(r);
  }
  std::size_t local = ranks_of[0].size();
  bool even = std::all_of(ranks_of.begin(), ranks_of.end(), [&](const auto& v) { return v.size() == local; });
  bool fits = order.size() + local + 1 <= communicators_max;
  bool useful = order.size() > 1 && local > 1;
  if (options_.topology == Topology::flat || (options_.topology == Topology::automatic && !(even && fits && useful)))
    return {};
  if (!even || !fits)
    return make_error(fmt::format("two-level topology needs the same number of ranks on every host (and at most {} "
                                  "hosts plus ranks per host); {} hosts have {} to {} ranks",
                                  communicators_max - 1, order.size(), local,
                                  std::max_element(ranks_of.begin(), ranks_of.end(),
                                                   [](const auto& a, const auto& b) { return a.size() < b.size(); })
                                      ->size()));
  two_level_ = TwoLevel{};
  for (const auto& members : ranks_of) {
    CommunicatorId id = add_communicator(members);
    if (position_in(id) >= 0) two_level_->local = id;
  }
  for (std::size_t i = 0; i < local; ++i) {
    std::vector<int64_t> members;
    for (const auto& on_host : ranks_of) members.push_back(on_host[i]);
    CommunicatorId id = add_communicator(members);
    if (position_in(id) >= 0) two_level_->cross = id;
  }
  spdlog::debug("transport: two-level all-reduce over {} hosts of {} ranks", order.size(), local);
  return {};
}

// Reduce-scatter within the host, all-reduce of this rank's segment across hosts,
// all-gather within the host. The three sequence numbers are taken now, so that calls
// issued later cannot overtake on one communicator what they follow on another.
void Transport::Impl::issue_two_level_all_reduce(void* data, std::size_t count, DataType type, ReduceOp op,
                                                 Completion done) {
  auto scatter = next_shape(two_level_->local, describe_call("all_reduce.local", type, count, 0, op));
  auto across = next_shape(two_level_->cross, describe_call("all_reduce.hosts", type, count, 0, op));
  auto gather = next_shape(two_level_->local, describe_call("all_reduce.gather", type, count, 0, op));
  if (!scatter || !across || !gather) return done(make_error("two-level communicators are missing"));
  auto segment = ring::segment(count, scatter->world_size, scatter->rank);
  auto* mine = static_cast<std::byte*>(data) + segment.begin * element_bytes(type);
  float average = op == ReduceOp::average ? 1.0f / static_cast<float>(options_.world_size) : 0.0f;
  Completion after_across = [=, gather = *gather](Status s) mutable {
    if (!s) return done(s);
    if (average != 0.0f) kernels::scale(mine, segment.count, average, type);  // identical bits on every host
    issue(gather, make_all_gather_segments(gather, data, count, type), std::move(done));
  };
  Completion after_scatter = [=, across = *across](Status s) mutable {
    if (!s) return after_across(s);
    issue(across, make_all_reduce(across, mine, segment.count, type, ReduceOp::sum), std::move(after_across));
  };
  issue(*scatter, make_reduce_scatter_segments(*scatter, data, count, type, ReduceOp::sum), std::move(after_scatter));
}

void Transport::Impl::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  worker_->signal();
  if (thread_.joinable()) thread_.join();
}

void Transport::Impl::close_endpoints() {
  std::vector<ucs_status_ptr_t> closing;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  for (ucp_ep_h& ep : endpoints_) {
    if (ep == nullptr) continue;
    closing.push_back(ucp_ep_close_nbx(ep, &p));
    ep = nullptr;
  }
  for (auto request : closing) wait_request(*worker_, request, teardown_bound_s);
  auto deadline = Clock::now() + std::chrono::duration<double>(teardown_bound_s);
  while (!in_flight_.empty() && Clock::now() < deadline) {
    worker_->progress();
    drain_finished();
    worker_->wait(10);
  }
  if (!in_flight_.empty())
    spdlog::warn("transport: {} transfers did not finish during teardown", in_flight_.size());
}

// ---- the progress thread --------------------------------------------------------

void Transport::Impl::submit(std::function<void()> command) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    commands_.push_back(std::move(command));
  }
  worker_->signal();
}

void Transport::Impl::run() {
  for (;;) {
    std::vector<std::function<void()>> commands;
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      commands.swap(commands_);
      stopping = stopping_;
    }
    for (auto& command : commands) command();
    // Reacting to finished transfers posts new ones, which may sit in UCX's queues
    // until the next progress: progress again until nothing finishes, or this rank
    // would sleep on work of its own that its peers are waiting for.
    do worker_->progress();
    while (drain_finished());
    if (!peer_failures_.empty() && !closing_) fail_all(make_error(peer_failures_.front()), Notify::peers);
    if (!peer_aborts_.empty() && !closing_) fail_all(make_error(peer_aborts_.front()), Notify::nobody);
    check_deadlines();
    if (stopping) break;
    // With operations in flight, poll a little before sleeping: a reply usually comes
    // within microseconds, and a sleep costs a wake-up on each side. Then wake at least
    // every busy_wait_ms: UCX 1.13's shared-memory transport does not always signal the
    // event fd (seen with 3+ ranks on one host).
    if (!operations_.empty() && worker_->poll_for(options_.poll_before_sleep_us)) continue;
    worker_->wait(operations_.empty() ? idle_wait_ms : busy_wait_ms);
  }
  // Shutdown: let what was sent reach its peers, then close.
  closing_ = true;
  if (!failed_) {
    ucp_request_param_t p{};
    wait_request(*worker_, ucp_worker_flush_nbx(worker_->worker(), &p), teardown_bound_s);
  }
  for (auto& [id, op] : operations_)
    op.done(make_error(op.collective->describe() + " was cut off by shutdown"));
  operations_.clear();
  close_endpoints();
}

void Transport::Impl::issue(uint64_t id, std::unique_ptr<Collective> collective, Completion done,
                            std::vector<float> owned, CommunicatorId comm, uint64_t tag) {
  if (failed_) {
    done(*failed_);
    return;
  }
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(options_.collective_timeout_s));
  auto& op = operations_[id];
  op = Operation{std::move(collective), std::move(done), deadline, std::move(owned), comm, tag, Clock::now()};
  op.collective->start(*this);
  if (op.collective->done()) complete(id, {});
}

void Transport::Impl::complete(uint64_t id, const Status& status) {
  auto it = operations_.find(id);
  if (it == operations_.end()) return;
  Completion done = std::move(it->second.done);
  operations_.erase(it);
  done(status);
}

// ---- transfers ------------------------------------------------------------------

void Transport::Impl::track(Transfer* t, ucs_status_ptr_t request) {
  if (UCS_PTR_IS_ERR(request)) {
    t->status = UCS_PTR_STATUS(request);
    finished_.push_back(t);
    return;
  }
  t->request = request;
  in_flight_.insert(t);
}

void Transport::Impl::post_send(int64_t peer, const void* data, std::size_t bytes, uint64_t tag, uint64_t op,
                                uint64_t chunk) {
  peer = world_rank_of(op, peer);
  auto* t = new Transfer{this, op, chunk, peer, false, tag, bytes};
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  p.cb.send = on_send;
  p.user_data = t;
  track(t, ucp_tag_send_nbx(endpoints_[peer], data, bytes, tag, &p));
}

void Transport::Impl::post_recv(int64_t peer, void* data, std::size_t bytes, uint64_t tag, uint64_t op,
                                uint64_t chunk) {
  peer = world_rank_of(op, peer);
  auto* t = new Transfer{this, op, chunk, peer, true, tag, bytes};
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  p.cb.recv = on_recv;
  p.user_data = t;
  // Collectives match regardless of the descriptor bits, so that a peer which issued
  // another call in this one's place is caught (drain_finished) instead of waited for.
  bool point_to_point = tag >> tag_bits::point_to_point_shift;
  uint64_t mask = point_to_point ? ~uint64_t{0} : ~tag_bits::descriptor_mask;
  track(t, ucp_tag_recv_nbx(worker_->worker(), data, bytes, tag, mask, &p));
}

void Transport::Impl::on_send(void* request, ucs_status_t status, void* user_data) {
  auto* t = static_cast<Transfer*>(user_data);
  t->status = status;
  ucp_request_free(request);
  t->self->finished_.push_back(t);
}

void Transport::Impl::on_recv(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                              void* user_data) {
  auto* t = static_cast<Transfer*>(user_data);
  t->status = status;
  if (info != nullptr) {
    t->received_tag = info->sender_tag;
    t->received_bytes = info->length;
  }
  ucp_request_free(request);
  t->self->finished_.push_back(t);
}

bool Transport::Impl::drain_finished() {
  bool any = !finished_.empty();
  while (!finished_.empty()) {
    std::vector<Transfer*> batch;
    batch.swap(finished_);
    // Out of flight before anything reacts: a failure below waits for in_flight_ to drain.
    for (Transfer* t : batch) in_flight_.erase(t);
    for (Transfer* t : batch) {
      std::unique_ptr<Transfer> owner(t);
      if (failed_ || closing_) continue;
      auto it = operations_.find(t->op);
      if (t->status != UCS_OK || (t->recv && (t->received_tag != t->tag || t->received_bytes != t->bytes))) {
        std::string what = it == operations_.end() ? "an operation" : it->second.collective->describe();
        fail_all(make_error(transfer_failure(*t, what)), Notify::peers);
        continue;
      }
      if (it == operations_.end()) continue;
      it->second.collective->on_transfer(*this, t->chunk);
      if (it->second.collective->done()) complete(t->op, {});
    }
  }
  return any;
}

// ---- failures --------------------------------------------------------------------

void Transport::Impl::on_peer_error(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* slot = static_cast<PeerSlot*>(arg);
  slot->self->peer_failures_.push_back(
      fmt::format("lost rank {}: {}", slot->rank, ucs_status_string(status)));
}

ucs_status_t Transport::Impl::on_abort(void* arg, const void* header, size_t header_bytes, void* data,
                                       size_t bytes, const ucp_am_recv_param_t*) {
  auto* self = static_cast<Impl*>(arg);
  auto reason = wire::decode_reason(wire::Kind::abort, header, header_bytes, data, bytes);
  if (!reason) {
    spdlog::warn("transport: dropped a malformed abort frame: {}", reason.error().message);
    return UCS_OK;
  }
  self->peer_failures_.push_back(
      fmt::format("rank {} stopped the job: {}", wire::header_rank(header), *reason));
  return UCS_OK;
}

// Why a transfer failed, in words naming the peer and what this rank was doing.
std::string Transport::Impl::transfer_failure(const Transfer& t, const std::string& what) const {
  if (t.status == UCS_ERR_MESSAGE_TRUNCATED || (t.status == UCS_OK && t.received_bytes != t.bytes))
    return fmt::format("rank {} sent a message of another size than this rank expected during {}: the ranks "
                       "issued different calls, or the same calls in different orders",
                       t.peer, what);
  if (t.status == UCS_OK)
    return fmt::format("rank {} issued another call where this rank issued {}: every rank must issue the same "
                       "collectives in the same order",
                       t.peer, what);
  return fmt::format("{} rank {} failed during {}: {}", t.recv ? "receiving from" : "sending to", t.peer, what,
                     ucs_status_string(t.status));
}

ucs_status_t Transport::Impl::on_actor_message(void* arg, const void* header, size_t header_bytes, void* data,
                                               size_t bytes, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Impl*>(arg);
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    spdlog::warn("transport: dropped an actor message sent by rendezvous (larger than the eager limit)");
    return UCS_OK;
  }
  auto message = wire::decode_message(header, header_bytes, data, bytes);
  if (!message) {
    spdlog::warn("transport: dropped a malformed actor message: {}", message.error().message);
    return UCS_OK;
  }
  if (self->failed_) return UCS_OK;
  if (self->message_handler_) {
    self->message_handler_(wire::header_rank(header), std::move(*message));
  } else if (self->early_messages_.size() < early_messages_max) {
    self->early_messages_.emplace_back(wire::header_rank(header), std::move(*message));  // before on_message
  } else {
    spdlog::warn("transport: dropped an actor message from rank {}: no handler yet and {} waiting",
                 wire::header_rank(header), early_messages_max);
  }
  return UCS_OK;
}

// The frame lives until UCX has sent it; its completion releases it.
void Transport::Impl::send_message(int64_t peer, std::vector<uint8_t> bytes, Completion done) {
  if (failed_) return done(*failed_);
  if (auto ok = check_peer(peer); !ok) return done(ok.error());
  if (bytes.size() > wire::message_bytes_max)
    return done(make_error(fmt::format("an actor message of {} bytes exceeds the limit of {}", bytes.size(),
                                       wire::message_bytes_max)));
  struct Pending {
    wire::Frame frame;
    Completion done;
  };
  auto* pending = new Pending{wire::encode_message(options_.rank, options_.world_size, bytes), std::move(done)};
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_AM_SEND_FLAG_EAGER;
  p.user_data = pending;
  p.cb.send = [](void* request, ucs_status_t status, void* user_data) {
    std::unique_ptr<Pending> owner(static_cast<Pending*>(user_data));
    ucp_request_free(request);
    owner->done(status == UCS_OK ? Status{} : ucx_error("sending an actor message", status));
  };
  auto& f = pending->frame;
  auto request = ucp_am_send_nbx(endpoints_[peer], static_cast<uint16_t>(wire::Kind::message), &f.header,
                                 sizeof f.header, f.payload.data(), f.payload.size(), &p);
  if (request == nullptr) {  // sent at once: no callback will come
    std::unique_ptr<Pending> owner(pending);
    owner->done({});
  } else if (UCS_PTR_IS_ERR(request)) {
    std::unique_ptr<Pending> owner(pending);
    owner->done(ucx_error(fmt::format("sending an actor message to rank {}", peer), UCS_PTR_STATUS(request)));
  }
}

std::string Transport::Impl::waiting_on(uint64_t op) const {
  std::string peers;
  for (const Transfer* t : in_flight_)
    if (t->op == op && t->recv) peers += (peers.empty() ? "" : ", ") + std::to_string(t->peer);
  return peers.empty() ? "its sends to finish" : "rank(s) " + peers;
}

// A peer that issued another call under this operation's number sends transfers whose
// tags differ in their step or chunk as well as their descriptor; they never match a
// receive and wait in UCX's unexpected queue. Probing that queue for the operation's
// number, any chunk and step, finds them.
void Transport::Impl::check_mismatches() {
  auto now = Clock::now();
  if (now - last_probe_ < mismatch_probe_period) return;
  last_probe_ = now;
  for (auto& [key, op] : operations_) {
    if (op.tag == 0 || now - op.started < mismatch_probe_period) continue;
    ucp_tag_recv_info_t info{};
    if (ucp_tag_probe_nb(worker_->worker(), op.tag, tag_bits::operation_mask, 0, &info) == nullptr) continue;
    if ((info.sender_tag & tag_bits::descriptor_mask) == (op.tag & tag_bits::descriptor_mask)) continue;
    int64_t sender = static_cast<int64_t>(info.sender_tag & ((uint64_t{1} << tag_bits::sender) - 1));
    int64_t from = world_rank_of(key, sender);
    fail_all(make_error(fmt::format("rank {} issued another call where this rank issued {}: every rank must "
                                    "issue the same collectives in the same order",
                                    from, op.collective->describe())),
             Notify::peers);
    return;
  }
}

void Transport::Impl::check_deadlines() {
  check_mismatches();
  auto now = Clock::now();
  for (auto& [id, op] : operations_) {
    if (now < op.deadline) continue;
    fail_all(
        make_error(fmt::format("{} did not complete within {} s; still waiting for {}",
                               op.collective->describe(), options_.collective_timeout_s, waiting_on(id))),
        Notify::peers);
    return;
  }
}

void Transport::Impl::fail_all(const Error& error, Notify notify) {
  if (failed_) return;
  failed_ = error;
  spdlog::error("transport: {}", error.message);
  if (notify == Notify::peers) tell_peers(error.message);
  for (Transfer* t : in_flight_)
    if (t->recv) ucp_request_cancel(worker_->worker(), t->request);
  close_endpoints();  // cancels the sends; every buffer is released before anyone hears of the failure
  auto operations = std::move(operations_);
  operations_.clear();
  for (auto& [id, op] : operations) op.done(error);
}

// Best effort, bounded: every peer still reachable learns why this rank stops.
void Transport::Impl::tell_peers(const std::string& reason) {
  auto frame = wire::encode_reason(wire::Kind::abort, options_.rank, options_.world_size, reason);
  std::vector<ucs_status_ptr_t> sends;
  ucp_request_param_t p{};
  for (ucp_ep_h ep : endpoints_) {
    if (ep == nullptr) continue;
    sends.push_back(ucp_am_send_nbx(ep, static_cast<uint16_t>(wire::Kind::abort), &frame.header,
                                    sizeof frame.header, frame.payload.data(), frame.payload.size(), &p));
  }
  for (auto request : sends) wait_request(*worker_, request, 0.5);
}

void Transport::Impl::abort_now(const std::string& reason) {
  fail_all(make_error(fmt::format("rank {} stopped the job: {}", options_.rank, reason)), Notify::peers);
}

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
      return done(make_error(fmt::format("broadcast from position {} of communicator {}: the root must be 0-{}",
                                         root, comm, shape->world_size - 1)));
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
    impl->issue(id, make_recv(id, peer, data, bytes, tag), std::move(done));
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
      return make_error(fmt::format("rank {} asked for a communicator with other members than rank {} did; "
                                    "every rank must pass the same list",
                                    r, rank()));
  auto promise = std::make_shared<std::promise<CommunicatorId>>();
  auto future = promise->get_future();
  impl_->submit([impl = impl_.get(), members, promise] { promise->set_value(impl->add_communicator(members)); });
  return future.get();
}

int64_t Transport::position_in(CommunicatorId comm) const { return impl_->position_in(comm); }

void Transport::on_message(MessageHandler handler) {
  impl_->submit([impl = impl_.get(), handler = std::move(handler)]() mutable {
    impl->message_handler_ = std::move(handler);
    for (auto& [from, bytes] : impl->early_messages_) impl->message_handler_(from, std::move(bytes));
    impl->early_messages_.clear();
  });
}

void Transport::post_message(int64_t peer, std::vector<uint8_t> bytes, Completion done) {
  impl_->submit([impl = impl_.get(), peer, bytes = std::move(bytes), done = std::move(done)]() mutable {
    impl->send_message(peer, std::move(bytes), std::move(done));
  });
}
bool Transport::two_level() const { return impl_->two_level_.has_value(); }

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

double Transport::sync_timeout_s() const { return impl_->options().collective_timeout_s + 10; }

Status Transport::all_reduce_sync(void* data, std::size_t count, DataType type, ReduceOp op, CommunicatorId comm) {
  return wait_for([&](Completion c) { all_reduce(data, count, type, op, std::move(c), comm); }, sync_timeout_s());
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

Status Transport::broadcast_sync(void* data, std::size_t count, DataType type, int64_t root, CommunicatorId comm) {
  return wait_for([&](Completion c) { broadcast(data, count, type, root, std::move(c), comm); }, sync_timeout_s());
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
