#include <set>

#include <fmt/format.h>

#include "transport/transport_impl.hpp"

namespace troupe {

// ---- failures --------------------------------------------------------------------

// A lost peer fails what is in flight, but only after a short grace: a peer that
// finished its last collective and exited may close its connection before this rank
// has taken in the data it sent. If nothing is in flight when the grace ends, the loss
// is kept and fails the next operation instead.
void Transport::Impl::react_to_lost_peers() {
  if (peer_failures_.empty() || closing_ || failed_) return;
  auto now = Clock::now();
  if (!first_loss_) first_loss_ = now;
  if (now - *first_loss_ < lost_peer_grace) return;
  if (operations_.empty()) {
    lost_ = make_error(peer_failures_.front());
    peer_failures_.clear();
    first_loss_.reset();
    return;
  }
  fail_all(make_error(peer_failures_.front()), Notify::peers);
}

// A rank of this host that dies is known at once from its pidfd (process_watch.hpp) and
// goes the way of a lost endpoint, so one killed under a launcher that then kills the rest
// within a second is still named by the ranks it leaves.
void Transport::Impl::check_processes() {
  if (processes_.empty() || closing_ || failed_) return;
  const auto now = Clock::now();
  if (now < next_process_check_) return;
  next_process_check_ = now + process_check_period;
  for (std::string& exit : processes_.exited()) peer_failures_.push_back("lost " + std::move(exit));
}

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
  self->peer_aborts_.push_back(
      fmt::format("rank {} stopped the job: {}", wire::header_rank(header), *reason));
  return UCS_OK;
}

// Why a transfer failed, in words naming the peer and what this rank was doing.
std::string Transport::Impl::transfer_failure(const Transfer& t, const std::string& what) const {
  if (t.status == UCS_ERR_MESSAGE_TRUNCATED || (t.status == UCS_OK && t.received_bytes != t.bytes))
    return fmt::format(
        "rank {} sent a message of another size than this rank expected during {}: the ranks "
        "issued different calls, or the same calls in different orders",
        t.peer, what);
  if (t.status == UCS_OK)
    return fmt::format(
        "rank {} issued another call where this rank issued {}: every rank must issue the same "
        "collectives in the same order",
        t.peer, what);
  return fmt::format("{} rank {} failed during {}: {}", t.recv ? "receiving from" : "sending to", t.peer,
                     what, ucs_status_string(t.status));
}

std::string Transport::Impl::waiting_on(uint64_t op) const {
  std::set<int64_t> peers;  // a peer may owe several chunks: named once
  for (const Transfer* t : in_flight_)
    if (t->op == op && t->recv) peers.insert(t->peer);
  if (peers.empty()) return "its sends to finish";
  return fmt::format("{} {}", peers.size() == 1 ? "rank" : "ranks", fmt::join(peers, ", "));
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

}  // namespace troupe
