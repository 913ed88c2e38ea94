#include "transport/bootstrap.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdio>

#include <chrono>
#include <cstring>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/constant_time.hpp"
#include "base/socket_address.hpp"
#include "transport/wire.hpp"

namespace troupe {
namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Sends one frame on `ep` and waits for it to leave.
Status send_frame(UcxWorker& worker, ucp_ep_h ep, const wire::Frame& frame, bool want_reply) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_AM_SEND_FLAG_EAGER | (want_reply ? UCP_AM_SEND_FLAG_REPLY : 0);
  auto request = ucp_am_send_nbx(ep, frame.header.kind, &frame.header, sizeof frame.header,
                                 frame.payload.data(), frame.payload.size(), &param);
  ucs_status_t s = wait_request(worker, request, 10.0);
  if (s != UCS_OK) return ucx_error("sending a bootstrap frame", s);
  return {};
}

void set_handler(UcxWorker& worker, wire::Kind kind, ucp_am_recv_callback_t cb, void* arg) {
  ucp_am_handler_param_t p{};
  p.field_mask =
      UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  p.id = static_cast<uint16_t>(kind);
  p.cb = cb;
  p.arg = arg;
  ucp_worker_set_am_recv_handler(worker.worker(), &p);
}

// ---- rank 0 -----------------------------------------------------------------

struct Joiner {
  ucp_ep_h reply_ep = nullptr;
  bool joined = false;
};

struct Coordinator {
  UcxWorker* worker;
  const TransportOptions* options;
  AddressTable table;
  std::vector<Joiner> joiners;
  std::vector<ucp_conn_request_h> pending_connections;
  std::vector<ucp_ep_h> accepted;
  struct Refusal {
    ucp_ep_h ep;
    std::string reason;
  };
  std::vector<Refusal> refusals;   // answered outside the AM callback
  std::size_t closed_by_peer = 0;  // joiners hang up once they hold the table
};

void on_connection(ucp_conn_request_h request, void* arg) {
  static_cast<Coordinator*>(arg)->pending_connections.push_back(request);
}

void on_accepted_ep_error(void* arg, ucp_ep_h, ucs_status_t status) {
  // A joiner that goes away during bootstrap shows up as a missing rank at the deadline.
  spdlog::debug("bootstrap: a joining connection closed: {}", ucs_status_string(status));
  static_cast<Coordinator*>(arg)->closed_by_peer++;
}

std::string check_hello(const Coordinator& c, const wire::Hello& hello) {
  if (!constant_time_equal(hello.token, c.options->token)) return "wrong cluster token";
  if (hello.world_size != c.options->world_size)
    return fmt::format("world size {} differs from the coordinator's {}", hello.world_size,
                       c.options->world_size);
  if (hello.rank == 0) return "rank 0 is the coordinator itself";
  if (c.joiners[hello.rank].joined)
    return fmt::format("rank {} has already joined, from host {}: two processes were given one rank number",
                       hello.rank, c.table.hosts[hello.rank]);
  return {};
}

ucs_status_t on_hello(void* arg, const void* header, size_t header_bytes, void* data, size_t bytes,
                      const ucp_am_recv_param_t* param) {
  auto& c = *static_cast<Coordinator*>(arg);
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    spdlog::warn("bootstrap: dropped an oversized hello frame");
    return UCS_OK;
  }
  auto hello = wire::decode_hello(header, header_bytes, data, bytes);
  if (!hello) {
    spdlog::warn("bootstrap: dropped a malformed hello frame: {}", hello.error().message);
    return UCS_OK;
  }
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) {
    spdlog::warn("bootstrap: dropped a hello frame without a reply endpoint");
    return UCS_OK;
  }
  std::string refusal = check_hello(c, *hello);
  if (!refusal.empty()) {
    spdlog::warn("bootstrap: refused a connection claiming rank {}: {}", hello->rank, refusal);
    c.refusals.push_back({param->reply_ep, refusal});
    return UCS_OK;
  }
  c.table.addresses[hello->rank] = std::move(hello->address);
  c.table.hosts[hello->rank] = std::move(hello->host);
  c.joiners[hello->rank] = Joiner{param->reply_ep, true};
  return UCS_OK;
}

void accept_pending(Coordinator& c) {
  for (ucp_conn_request_h request : c.pending_connections) {
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                   UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    p.conn_request = request;
    p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    p.err_handler.cb = on_accepted_ep_error;
    p.err_handler.arg = &c;
    ucp_ep_h ep = nullptr;
    ucs_status_t s = ucp_ep_create(c.worker->worker(), &p, &ep);
    if (s == UCS_OK)
      c.accepted.push_back(ep);
    else
      spdlog::warn("bootstrap: could not accept a connection: {}", ucs_status_string(s));
  }
  c.pending_connections.clear();
}

void answer_refusals(Coordinator& c) {
  auto refusals = std::move(c.refusals);
  c.refusals.clear();
  for (const auto& r : refusals) {
    auto frame = wire::encode_reason(wire::Kind::reject, 0, c.options->world_size, r.reason);
    auto sent = send_frame(*c.worker, r.ep, frame, false);
    if (!sent) spdlog::warn("bootstrap: could not send a refusal: {}", sent.error().message);
  }
}

std::string missing_ranks(const Coordinator& c) {
  std::string out;
  for (std::size_t r = 1; r < c.joiners.size(); ++r)
    if (!c.joiners[r].joined) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

bool all_joined(const Coordinator& c) {
  for (std::size_t r = 1; r < c.joiners.size(); ++r)
    if (!c.joiners[r].joined) return false;
  return true;
}

Error listen_error(const TransportOptions& o, ucs_status_t s) {
  std::string why = s == UCS_ERR_BUSY ? "the port is already in use; choose a free port with "
                                        "--set cluster.coordinator=HOST:PORT"
                                      : ucs_status_string(s);
  return make_error(fmt::format("rank 0 cannot listen on coordinator {}:{}: {}", o.coordinator_host,
                                o.coordinator_port, why));
}

Result<AddressTable> coordinate(UcxWorker& worker, const TransportOptions& o) {
  auto addr = resolve_socket_address(o.coordinator_host, o.coordinator_port);
  if (!addr) return make_error(fmt::format("{} (from {})", addr.error().message, o.coordinator_source));
  Coordinator c{&worker, &o, AddressTable{}, std::vector<Joiner>(o.world_size), {}, {}, {}};
  c.table.addresses.assign(o.world_size, {});
  c.table.hosts.assign(o.world_size, {});
  c.table.addresses[0] = worker.address();
  c.table.hosts[0] = host_identity(o);
  set_handler(worker, wire::Kind::hello, on_hello, &c);

  ucp_listener_params_t lp{};
  lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  lp.sockaddr.addr = addr->get();
  lp.sockaddr.addrlen = addr->length;
  lp.conn_handler.cb = on_connection;
  lp.conn_handler.arg = &c;
  ucp_listener_h listener = nullptr;
  ucs_status_t s = ucp_listener_create(worker.worker(), &lp, &listener);
  if (s != UCS_OK) return listen_error(o, s);

  auto deadline = deadline_after(o.bootstrap_timeout_s);
  Status result;
  while (!all_joined(c)) {
    worker.progress();
    accept_pending(c);
    answer_refusals(c);
    if (Clock::now() > deadline) {
      result = make_error(fmt::format("bootstrap: rank(s) {} did not join within {} s (coordinator {}:{})",
                                      missing_ranks(c), o.bootstrap_timeout_s, o.coordinator_host,
                                      o.coordinator_port));
      break;
    }
    worker.wait(50);
  }
  if (result.ok()) {
    auto frame = wire::encode_table(o.world_size, wire::Table{c.table.addresses, c.table.hosts});
    for (std::size_t r = 1; r < c.joiners.size() && result.ok(); ++r)
      result = send_frame(worker, c.joiners[r].reply_ep, frame, false);
  }
  set_handler(worker, wire::Kind::hello, nullptr, nullptr);
  ucp_listener_destroy(listener);
  // Joiners hang up once they hold the table; closing first could cut it off in flight.
  auto linger = deadline_after(5.0);
  while (result.ok() && c.closed_by_peer < c.accepted.size() && Clock::now() < linger) {
    worker.progress();
    worker.wait(20);
  }
  for (ucp_ep_h ep : c.accepted) close_endpoint(worker, ep);
  if (!result) return result.error();
  return std::move(c.table);
}

// ---- every other rank --------------------------------------------------------

struct Joining {
  std::optional<AddressTable> table;
  std::optional<std::string> refusal;
  std::optional<std::string> failure;  // why the connection to rank 0 broke
};

ucs_status_t on_table(void* arg, const void* header, size_t header_bytes, void* data, size_t bytes,
                      const ucp_am_recv_param_t*) {
  auto& j = *static_cast<Joining*>(arg);
  auto table = wire::decode_table(header, header_bytes, data, bytes);
  if (!table)
    j.failure = "malformed address table: " + table.error().message;
  else
    j.table = AddressTable{std::move(table->addresses), std::move(table->hosts)};
  return UCS_OK;
}

ucs_status_t on_reject(void* arg, const void* header, size_t header_bytes, void* data, size_t bytes,
                       const ucp_am_recv_param_t*) {
  auto& j = *static_cast<Joining*>(arg);
  auto reason = wire::decode_reason(wire::Kind::reject, header, header_bytes, data, bytes);
  j.refusal = reason ? *reason : "malformed refusal";
  return UCS_OK;
}

void on_coordinator_ep_error(void* arg, ucp_ep_h, ucs_status_t status) {
  static_cast<Joining*>(arg)->failure = ucs_status_string(status);
}

// One attempt: connect, say hello, wait for the table, a refusal or a broken connection.
Status try_join(UcxWorker& worker, const TransportOptions& o, const SocketAddress& addr, Joining& j,
                Clock::time_point deadline) {
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                 UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  p.sockaddr.addr = addr.get();
  p.sockaddr.addrlen = addr.length;
  p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  p.err_handler.cb = on_coordinator_ep_error;
  p.err_handler.arg = &j;
  ucp_ep_h ep = nullptr;
  ucs_status_t s = ucp_ep_create(worker.worker(), &p, &ep);
  if (s != UCS_OK) return ucx_error("connecting to the coordinator", s);

  auto hello =
      wire::encode_hello(wire::Hello{o.rank, o.world_size, o.token, worker.address(), host_identity(o)});
  Status sent = send_frame(worker, ep, hello, true);
  while (sent.ok() && !j.table && !j.refusal && !j.failure && Clock::now() < deadline) {
    worker.progress();
    worker.wait(50);
  }
  close_endpoint(worker, ep);
  if (!sent) return sent;
  return {};
}

Result<AddressTable> join(UcxWorker& worker, const TransportOptions& o) {
  auto addr = resolve_socket_address(o.coordinator_host, o.coordinator_port);
  if (!addr) return make_error(fmt::format("{} (from {})", addr.error().message, o.coordinator_source));
  Joining j;
  set_handler(worker, wire::Kind::table, on_table, &j);
  set_handler(worker, wire::Kind::reject, on_reject, &j);
  auto deadline = deadline_after(o.bootstrap_timeout_s);
  std::string last_error = "no answer";
  while (!j.table && !j.refusal && Clock::now() < deadline) {
    j.failure.reset();
    Status attempt = try_join(worker, o, *addr, j, deadline);
    if (!attempt) last_error = attempt.error().message;
    if (j.failure) last_error = *j.failure;
    if (!j.table && !j.refusal) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  set_handler(worker, wire::Kind::table, nullptr, nullptr);
  set_handler(worker, wire::Kind::reject, nullptr, nullptr);
  if (j.refusal)
    return make_error(fmt::format("rank 0 at {}:{} refused rank {}: {}", o.coordinator_host,
                                  o.coordinator_port, o.rank, *j.refusal));
  if (!j.table)
    return make_error(fmt::format("rank {} could not join the cluster at {}:{} (from {}) within {} s: {}",
                                  o.rank, o.coordinator_host, o.coordinator_port, o.coordinator_source,
                                  o.bootstrap_timeout_s, last_error));
  return std::move(*j.table);
}

}  // namespace

std::string host_identity(const TransportOptions& o) {
  if (!o.host_id.empty()) return o.host_id.substr(0, wire::host_bytes_max);
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  std::string boot;
  if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char id[64] = {};
    if (std::fgets(id, sizeof id, f)) boot = id;
    std::fclose(f);
  }
  while (!boot.empty() && (boot.back() == '\n' || boot.back() == ' ')) boot.pop_back();
  return (std::string(name) + "/" + boot).substr(0, wire::host_bytes_max);
}

Result<AddressTable> bootstrap(UcxWorker& worker, const TransportOptions& o) {
  if (o.world_size == 1) return AddressTable{{worker.address()}, {host_identity(o)}};
  return o.rank == 0 ? coordinate(worker, o) : join(worker, o);
}

}  // namespace troupe
