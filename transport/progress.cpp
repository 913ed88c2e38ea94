#include "transport/transport_impl.hpp"

namespace troupe {

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
  h.id = static_cast<uint16_t>(wire::Kind::heartbeat);
  h.cb = on_heartbeat;
  s = ucp_worker_set_am_recv_handler(worker_->worker(), &h);
  if (s != UCS_OK) return ucx_error("registering the heartbeat handler", s);

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
    if (table.hosts[peer] == table.hosts[options_.rank]) processes_.watch(peer, table.processes[peer]);
  }
  return plan_topology(table.hosts);
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
  commands_waiting_.store(true, std::memory_order_release);
  worker_->signal();
}

void Transport::Impl::run() {
  for (;;) {
    std::vector<std::function<void()>> commands;
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      commands.swap(commands_);
      commands_waiting_.store(false, std::memory_order_relaxed);
      stopping = stopping_;
    }
    for (auto& command : commands) command();
    // Reacting to finished transfers posts new ones, which may sit in UCX's queues
    // until the next progress: progress again until nothing finishes, or this rank
    // would sleep on work of its own that its peers are waiting for.
    do worker_->progress();
    while (drain_finished());
    check_processes();
    react_to_lost_peers();
    if (!peer_aborts_.empty() && !closing_) fail_all(make_error(peer_aborts_.front()), Notify::nobody);
    check_deadlines();
    keep_heartbeats();
    if (stopping) break;
    // With a collective or a send under way, or actor messages just sent or received, poll
    // a little before sleeping: a reply usually comes within microseconds, and a sleep
    // costs a wake-up on each side; a command submitted meanwhile ends the poll. Then wake
    // at least every busy_wait_ms: UCX 1.13's shared-memory transport does not always
    // signal the event fd (seen with 3+ ranks on one host). Receives posted ahead (a
    // pipeline stage's, for activations due later) only wait for their peer: polling and
    // waking every millisecond for them took 8-9% of a core per rank, from compute, on a
    // 2-core machine; their arrival is signalled, and receive_wait_ms bounds a miss.
    const bool busy = driving();
    const bool reply_likely = busy || std::exchange(messages_moved_, false);
    if (reply_likely && worker_->poll_for(options_.poll_before_sleep_us, &commands_waiting_)) continue;
    worker_->wait(busy ? busy_wait_ms : operations_.empty() ? idle_wait_ms : receive_wait_ms);
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
  if (lost_ && !failed_) fail_all(*lost_, Notify::peers);  // a peer left earlier: the world is broken
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

void Transport::Impl::issue_receive(uint64_t id, std::unique_ptr<Collective> receive, Completion done) {
  issue(id, std::move(receive), std::move(done));
  if (auto it = operations_.find(id); it != operations_.end()) it->second.awaits_peer = true;
}

bool Transport::Impl::driving() const {
  for (const auto& [id, op] : operations_)
    if (!op.awaits_peer) return true;
  return false;
}

void Transport::Impl::complete(uint64_t id, const Status& status) {
  auto it = operations_.find(id);
  if (it == operations_.end()) return;
  Completion done = std::move(it->second.done);
  if (options_.tracer && status.ok() && it->second.first_moved_us != 0)
    options_.tracer->span("comm", it->second.collective->describe(), it->second.first_moved_us,
                          Tracer::now_us());
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
  bytes_sent_->fetch_add(bytes, std::memory_order_relaxed);
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
      // A receive that finished is bytes that arrived; a send that finished may only have
      // been copied out (eager) while the peer is still elsewhere, so it does not count.
      if (options_.tracer && t->recv && it->second.first_moved_us == 0)
        it->second.first_moved_us = Tracer::now_us();
      it->second.collective->on_transfer(*this, t->chunk);
      if (it->second.collective->done()) complete(t->op, {});
    }
  }
  return any;
}

}  // namespace troupe
