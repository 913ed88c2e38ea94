#include "transport/bootstrap.hpp"

#include <poll.h>
#include <unistd.h>

#include <cstdio>

#include <cerrno>
#include <cstring>

#include <chrono>
#include <optional>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/constant_time.hpp"
#include "base/socket_address.hpp"
#include "transport/process_watch.hpp"
#include "transport/tcp_stream.hpp"
#include "transport/wire.hpp"

namespace troupe {
namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// The largest payloads a well-formed peer sends: a hello, and the table of `world_size` ranks
// (length prefixes, the fields' limits and each rank's process id).
constexpr std::size_t process_bytes = sizeof(uint64_t) + sizeof(int64_t);
constexpr std::size_t hello_bytes_max =
    3 * 4 + wire::token_bytes_max + wire::address_bytes_max + wire::host_bytes_max + process_bytes;
std::size_t table_bytes_max(int64_t world_size) {
  return 4 + static_cast<std::size_t>(world_size) *
                 (8 + wire::address_bytes_max + wire::host_bytes_max + process_bytes);
}

Result<std::vector<SocketAddress>> coordinator_addresses(const TransportOptions& o) {
  auto addresses = resolve_socket_addresses(o.coordinator_host, o.coordinator_port);
  if (!addresses)
    return make_error(fmt::format("{} (from {})", addresses.error().message, o.coordinator_source));
  return addresses;
}

// ---- rank 0 -----------------------------------------------------------------

// A connection that has not said hello yet, or the joined rank it belongs to.
struct Connection {
  Socket socket;
  FrameReader reader{hello_bytes_max};
  int64_t rank = -1;
};

struct Coordinator {
  const TransportOptions* options;
  AddressTable table;
  std::vector<Socket> listeners;
  std::vector<Connection> connections;
  std::set<int64_t> left;  // joined, then hung up before the table went out
};

std::string check_hello(const Coordinator& c, const wire::Hello& hello) {
  if (!constant_time_equal(hello.token, c.options->token)) return "wrong cluster token";
  if (hello.world_size != c.options->world_size)
    return fmt::format("world size {} differs from the coordinator's {}", hello.world_size,
                       c.options->world_size);
  if (hello.rank == 0) return "rank 0 is the coordinator itself";
  for (const auto& joined : c.connections)
    if (joined.rank == hello.rank)
      return fmt::format("rank {} has already joined, from host {}: two processes were given one rank number",
                         hello.rank, c.table.hosts[hello.rank]);
  return {};
}

// Takes a hello off `connection`; false when the connection is to be dropped.
bool take_hello(Coordinator& c, Connection& connection, const StreamFrame& frame) {
  auto hello =
      wire::decode_hello(&frame.header, sizeof frame.header, frame.payload.data(), frame.payload.size());
  if (!hello) {
    spdlog::warn("bootstrap: dropped a connection whose first frame was not a hello: {}",
                 hello.error().message);
    return false;
  }
  std::string refusal = check_hello(c, *hello);
  if (!refusal.empty()) {
    spdlog::warn("bootstrap: refused a connection claiming rank {}: {}", hello->rank, refusal);
    auto frame_out = wire::encode_reason(wire::Kind::reject, 0, c.options->world_size, refusal);
    auto sent = send_frame(connection.socket, frame_out, deadline_after(2.0));
    if (!sent) spdlog::warn("bootstrap: could not send a refusal: {}", sent.error().message);
    return false;
  }
  connection.rank = hello->rank;
  c.left.erase(hello->rank);
  c.table.addresses[hello->rank] = std::move(hello->address);
  c.table.hosts[hello->rank] = std::move(hello->host);
  c.table.processes[hello->rank] = hello->process;
  return true;
}

// Reads what `connection` sent; false when it closed or broke the protocol. A joined rank
// says nothing more, so anything from it ends its connection and it must join again.
bool serve(Coordinator& c, Connection& connection) {
  for (;;) {
    auto frame = connection.reader.read_available(connection.socket);
    if (frame && *frame && connection.rank < 0) {
      if (!take_hello(c, connection, **frame)) return false;
      continue;
    }
    if (frame && !*frame) return true;
    const std::string why = frame ? "it sent more than its hello" : frame.error().message;
    if (connection.rank >= 0) {
      c.left.insert(connection.rank);
      spdlog::warn("bootstrap: rank {}'s connection ended before the table was sent ({}); it must join again",
                   connection.rank, why);
    } else if (why != "closed") {  // a stranger's bytes or another build's frames: said, and answered
      spdlog::warn("bootstrap: dropped a connection before its hello: {}", why);
      auto refusal = wire::encode_reason(wire::Kind::reject, 0, c.options->world_size, why);
      (void)send_frame(connection.socket, refusal, deadline_after(2.0));
    }
    return false;
  }
}

void accept_waiting(Coordinator& c) {
  for (const Socket& listener : c.listeners) {
    Socket s = tcp_accept(listener);
    for (; s.valid(); s = tcp_accept(listener)) c.connections.push_back(Connection{std::move(s)});
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      // The connection stays queued and the listener readable: wait rather than spin.
      spdlog::warn("bootstrap: cannot accept a connection now: {}", std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

// One round: waits up to 50 ms for anything to read, then serves it.
void serve_round(Coordinator& c) {
  std::vector<pollfd> fds;
  for (const Socket& l : c.listeners) fds.push_back(pollfd{l.fd(), POLLIN, 0});
  for (const Connection& k : c.connections) fds.push_back(pollfd{k.socket.fd(), POLLIN, 0});
  if (poll(fds.data(), fds.size(), 50) <= 0) return;
  std::vector<Connection> kept;
  for (std::size_t i = 0; i < c.connections.size(); ++i) {
    bool ready = fds[c.listeners.size() + i].revents != 0;
    if (!ready || serve(c, c.connections[i])) kept.push_back(std::move(c.connections[i]));
  }
  c.connections = std::move(kept);
  accept_waiting(c);
}

// The ranks not joined now; with `left` false, only those that never joined.
std::string missing_ranks(const Coordinator& c, bool left = true) {
  std::vector<bool> joined(c.options->world_size, false);
  for (const auto& k : c.connections)
    if (k.rank >= 0) joined[k.rank] = true;
  std::string out;
  for (std::size_t r = 1; r < joined.size(); ++r)
    if (!joined[r] && (left || !c.left.count(r))) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

std::string join_timeout(const Coordinator& c) {
  const TransportOptions& o = *c.options;
  std::string never = missing_ranks(c, false), left;
  for (int64_t r : c.left) left += (left.empty() ? "" : ", ") + std::to_string(r);
  std::string what =
      never.empty() ? "" : fmt::format("rank(s) {} did not join within {} s", never, o.bootstrap_timeout_s);
  if (!left.empty())
    what +=
        fmt::format("{}rank(s) {} joined but hung up before every rank had", what.empty() ? "" : "; ", left);
  return fmt::format("bootstrap: {} (coordinator {})", what,
                     host_port_text(o.coordinator_host, o.coordinator_port));
}

// Listens on every address of the coordinator this machine holds.
Status listen_all(Coordinator& c, const std::vector<SocketAddress>& addresses) {
  const TransportOptions& o = *c.options;
  std::string why;
  for (const SocketAddress& address : addresses) {
    bool busy = false;
    auto listener = tcp_listen(address, &busy);
    if (busy)
      return make_error(fmt::format(
          "rank 0 cannot listen on coordinator {}: the port is already in use; choose a free port with "
          "--set cluster.coordinator=HOST:PORT",
          host_port_text(o.coordinator_host, o.coordinator_port)));
    if (listener)
      c.listeners.push_back(std::move(*listener));
    else if (why.empty())
      why = fmt::format("{}: {}", address.text(), listener.error().message);
  }
  if (c.listeners.empty())
    return make_error(fmt::format("rank 0 cannot listen on coordinator {} (from {}): {}",
                                  host_port_text(o.coordinator_host, o.coordinator_port),
                                  o.coordinator_source, why));
  return {};
}

Result<AddressTable> coordinate(UcxWorker& worker, const TransportOptions& o) {
  auto addresses = coordinator_addresses(o);
  if (!addresses) return addresses.error();
  Coordinator c{&o, AddressTable{}, {}, {}, {}};
  c.table.addresses.assign(o.world_size, {});
  c.table.hosts.assign(o.world_size, {});
  c.table.processes.assign(o.world_size, {});
  c.table.addresses[0] = worker.address();
  c.table.hosts[0] = host_identity(o);
  c.table.processes[0] = this_process();
  TROUPE_TRY(listen_all(c, *addresses));

  auto deadline = deadline_after(o.bootstrap_timeout_s);
  while (!missing_ranks(c).empty()) {
    if (Clock::now() > deadline) return make_error(join_timeout(c));
    serve_round(c);
  }
  c.listeners.clear();
  auto frame =
      wire::encode_table(o.world_size, wire::Table{c.table.addresses, c.table.hosts, c.table.processes});
  for (const Connection& k : c.connections) {
    if (k.rank < 0) continue;
    auto sent = send_frame(k.socket, frame, deadline_after(10.0));  // each rank its own 10 s
    if (!sent)
      return make_error(
          fmt::format("bootstrap: sending rank {} the address table: {}", k.rank, sent.error().message));
  }
  return std::move(c.table);
}

// ---- every other rank --------------------------------------------------------

// What one attempt ended with: the table, rank 0's refusal, or why it failed.
struct Answer {
  std::optional<AddressTable> table;
  std::optional<std::string> refusal;
  std::string failure;
};

Answer try_join(UcxWorker& worker, const TransportOptions& o, const SocketAddress& address,
                Clock::time_point deadline) {
  auto socket = tcp_connect(address, std::min(deadline, deadline_after(5.0)));
  if (!socket) return Answer{{}, {}, socket.error().message};
  auto hello = wire::encode_hello(
      wire::Hello{o.rank, o.world_size, o.token, worker.address(), host_identity(o), this_process()});
  Status sent = send_frame(*socket, hello, deadline);
  if (!sent) return Answer{{}, {}, sent.error().message};
  FrameReader reader(table_bytes_max(o.world_size));
  auto frame = receive_frame(*socket, reader, deadline);
  if (!frame) return Answer{{}, {}, frame.error().message};
  const auto& [header, payload] = *frame;
  if (header.kind == static_cast<uint16_t>(wire::Kind::reject)) {
    auto reason =
        wire::decode_reason(wire::Kind::reject, &header, sizeof header, payload.data(), payload.size());
    return Answer{{}, reason ? *reason : "malformed refusal", {}};
  }
  auto table = wire::decode_table(&header, sizeof header, payload.data(), payload.size());
  if (!table) return Answer{{}, {}, "malformed address table: " + table.error().message};
  if (static_cast<int64_t>(table->addresses.size()) != o.world_size)
    return Answer{{}, {}, "an address table for another world size"};
  return Answer{
      AddressTable{std::move(table->addresses), std::move(table->hosts), std::move(table->processes)},
      {},
      {}};
}

Result<AddressTable> join(UcxWorker& worker, const TransportOptions& o) {
  auto addresses = coordinator_addresses(o);
  if (!addresses) return addresses.error();
  const std::string coordinator = host_port_text(o.coordinator_host, o.coordinator_port);
  auto deadline = deadline_after(o.bootstrap_timeout_s);
  std::string last_error = "no answer";
  while (Clock::now() < deadline) {
    for (const SocketAddress& address : *addresses) {
      Answer answer = try_join(worker, o, address, deadline);
      if (answer.table) return std::move(*answer.table);
      if (answer.refusal)
        return make_error(
            fmt::format("rank 0 at {} refused rank {}: {}", coordinator, o.rank, *answer.refusal));
      last_error = addresses->size() > 1 ? address.text() + ": " + answer.failure : answer.failure;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return make_error(fmt::format("rank {} could not join the cluster at {} (from {}) within {} s: {}", o.rank,
                                coordinator, o.coordinator_source, o.bootstrap_timeout_s, last_error));
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
  if (o.world_size == 1) return AddressTable{{worker.address()}, {host_identity(o)}, {this_process()}};
  return o.rank == 0 ? coordinate(worker, o) : join(worker, o);
}

}  // namespace troupe
