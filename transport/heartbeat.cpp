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

ucs_status_t Transport::Impl::on_heartbeat(void* arg, const void* header, size_t header_bytes, void* data,
                                           size_t bytes, const ucp_am_recv_param_t*) {
  auto* self = static_cast<Impl*>(arg);
  if (!wire::decode_reason(wire::Kind::heartbeat, header, header_bytes, data, bytes)) return UCS_OK;
  const int64_t rank = wire::header_rank(header);  // checked against the world by decode_reason
  if (rank >= 0 && rank < static_cast<int64_t>(self->heard_.size()))
    self->heard_[static_cast<std::size_t>(rank)] = Clock::now();
  return UCS_OK;
}

// Everything a beat needs is fixed once the world is connected: who is watched, the frame
// (sent as it is, so it outlives every send of it) and the period.
void Transport::Impl::start_heartbeats() {
  if (options_.world_size < 2) return;
  watched_.clear();
  if (options_.rank != 0) watched_.push_back(0);
  for (int64_t r = 1; options_.rank == 0 && r < options_.world_size; ++r) watched_.push_back(r);
  heartbeat_frame_ = wire::encode_reason(wire::Kind::heartbeat, options_.rank, options_.world_size, "");
  heartbeat_period_ = heartbeat_period(options_.peer_timeout_s);
  heard_.assign(static_cast<std::size_t>(options_.world_size), Clock::now());
  next_heartbeat_ = Clock::now();
}

// Called on every turn of the progress loop: sends this rank's heartbeats when a beat is
// due, and looks for a watched peer silent for too long every turn (a scan of timestamps),
// so a silence is found within a turn of peer_timeout_s, not a period later.
void Transport::Impl::keep_heartbeats() {
  if (watched_.empty() || closing_ || failed_) return;
  const auto now = Clock::now();
  if (now >= next_heartbeat_) {
    next_heartbeat_ = now + heartbeat_period_;
    send_heartbeats();
  }
  check_silence(now);
}

void Transport::Impl::send_heartbeats() {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_AM_SEND_FLAG_EAGER;
  for (int64_t peer : watched_) {
    ucp_ep_h ep = endpoints_[static_cast<std::size_t>(peer)];
    if (ep == nullptr) continue;
    // Fire and forget: a heartbeat that cannot go is the peer's problem to report.
    ucs_status_ptr_t request = ucp_am_send_nbx(
        ep, static_cast<uint16_t>(wire::Kind::heartbeat), &heartbeat_frame_.header,
        sizeof heartbeat_frame_.header, heartbeat_frame_.payload.data(), heartbeat_frame_.payload.size(), &p);
    if (UCS_PTR_IS_PTR(request)) ucp_request_free(request);
  }
}

void Transport::Impl::check_silence(Clock::time_point now) {
  const auto limit = std::chrono::duration<double>(options_.peer_timeout_s);
  for (int64_t peer : watched_) {
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
