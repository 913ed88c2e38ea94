#include "transport/transport_impl.hpp"

namespace troupe {

// ---- actor messages ----------------------------------------------------------------

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
  self->messages_moved_ = true;
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
  messages_moved_ = true;
  auto* pending =
      new Pending{wire::encode_message(options_.rank, options_.world_size, bytes), std::move(done)};
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

// Frames that came before the handler are delivered first, in arrival order.
void Transport::Impl::set_message_handler(MessageHandler handler) {
  message_handler_ = std::move(handler);
  for (auto& [from, bytes] : early_messages_) message_handler_(from, std::move(bytes));
  early_messages_.clear();
}

}  // namespace troupe
