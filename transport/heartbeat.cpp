#include "transport/transport_impl.hpp"

namespace troupe {

// ---- heartbeats ------------------------------------------------------------------
//
// A peer that dies closes its connections and UCX reports it; a peer that is stopped
// (SIGSTOP), frozen or cut off without a reset says nothing, and without heartbeats it is
// found only when a collective times out, by a rank that can name only the peer it was
// waiting for. So the progress thread of every rank sends a heartbeat frame every quarter
// of peer_timeout_s: rank 0 to every rank, every other rank to rank 0 (a star, so the cost
// grows with the world size, not its square). Rank 0 watches everyone, the others watch
// rank 0; a watched peer silent for longer than peer_timeout_s stops this rank with a
// sentence naming it, and, through the abort frame, every rank still reachable.

namespace {

Clock::duration heartbeat_period(double peer_timeout_s) {
  const double seconds = std::min(5.0, std::max(0.05, peer_timeout_s / 4));
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

std::vector<int64_t> Transport::Impl::watched_peers() const {
  if (options_.rank != 0) return {0};
  std::vector<int64_t> everyone;
  for (int64_t r = 1; r < options_.world_size; ++r) everyone.push_back(r);
  return everyone;
}

ucs_status_t Transport::Impl::on_heartbeat(void* arg, const void* header, size_t header_bytes, void* data,
                                           size_t bytes, const ucp_am_recv_param_t*) {
  auto* self = static_cast<Impl*>(arg);
  if (!wire::decode_reason(wire::Kind::heartbeat, header, header_bytes, data, bytes)) return UCS_OK;
  const int64_t rank = wire::header_rank(header);  // checked against the world by decode_reason
  if (rank >= 0 && rank < static_cast<int64_t>(self->heard_.size()))
    self->heard_[static_cast<std::size_t>(rank)] = Clock::now();
  return UCS_OK;
}

void Transport::Impl::start_heartbeats() {
  heard_.assign(static_cast<std::size_t>(options_.world_size), Clock::now());
  heartbeats_on_ = true;
}

void Transport::Impl::keep_heartbeats() {
  if (!heartbeats_on_ || options_.world_size < 2 || closing_ || failed_) return;
  const auto now = Clock::now();
  if (now >= next_heartbeat_) {
    next_heartbeat_ = now + heartbeat_period(options_.peer_timeout_s);
    if (heartbeat_frame_.payload.empty())
      heartbeat_frame_ = wire::encode_reason(wire::Kind::heartbeat, options_.rank, options_.world_size, "");
    const wire::Frame& frame = heartbeat_frame_;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_EAGER;
    for (int64_t peer : watched_peers()) {
      ucp_ep_h ep = endpoints_[static_cast<std::size_t>(peer)];
      if (ep == nullptr) continue;
      // Fire and forget: a heartbeat that cannot go is the peer's problem to report.
      ucs_status_ptr_t request =
          ucp_am_send_nbx(ep, static_cast<uint16_t>(wire::Kind::heartbeat), &frame.header,
                          sizeof frame.header, frame.payload.data(), frame.payload.size(), &p);
      if (UCS_PTR_IS_PTR(request)) ucp_request_free(request);
    }
  }
  const auto limit = std::chrono::duration<double>(options_.peer_timeout_s);
  for (int64_t peer : watched_peers()) {
    const auto silent = std::chrono::duration<double>(now - heard_[static_cast<std::size_t>(peer)]);
    if (silent <= limit) continue;
    auto error = make_error(fmt::format(
        "rank {} has not been heard from for {:.1f} s, more than [cluster] peer_timeout_s = {} s: it is "
        "stopped, hung or cut off",
        peer, silent.count(), options_.peer_timeout_s));
    if (operations_.empty()) {
      lost_ = error;  // nothing waits on it yet: the next operation fails with this
    } else {
      fail_all(error, Notify::peers);
    }
    heard_[static_cast<std::size_t>(peer)] = now;  // said once
    return;
  }
}

}  // namespace troupe
