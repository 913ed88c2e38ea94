#include "transport/wire.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace troupe::wire {
namespace {

class Writer {
 public:
  void u32(uint32_t v) { bytes(&v, sizeof v); }
  void process(const ProcessId& p) {
    bytes(&p.pid_namespace, sizeof p.pid_namespace);
    bytes(&p.pid, sizeof p.pid);
  }
  void bytes(const void* p, std::size_t n) {
    auto* b = static_cast<const uint8_t*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  void blob(const void* p, std::size_t n) {
    u32(static_cast<uint32_t>(n));
    bytes(p, n);
  }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

// Reads length-prefixed fields, never past the end; every failure is an Error.
class Reader {
 public:
  Reader(const void* p, std::size_t n) : p_(static_cast<const uint8_t*>(p)), left_(n) {}
  Result<uint32_t> u32() {
    if (left_ < sizeof(uint32_t)) return make_error("frame truncated reading a length");
    uint32_t v;
    std::memcpy(&v, p_, sizeof v);
    advance(sizeof v);
    return v;
  }
  Result<ProcessId> process() {
    if (left_ < sizeof(uint64_t) + sizeof(int64_t)) return make_error("frame truncated reading a process id");
    ProcessId p;
    std::memcpy(&p.pid_namespace, p_, sizeof p.pid_namespace);
    std::memcpy(&p.pid, p_ + sizeof p.pid_namespace, sizeof p.pid);
    advance(sizeof p.pid_namespace + sizeof p.pid);
    return p;
  }
  Result<std::vector<uint8_t>> blob(std::size_t max_bytes, const char* what) {
    auto n = u32();
    if (!n) return n.error();
    if (*n > max_bytes) return make_error(fmt::format("{} of {} bytes exceeds {}", what, *n, max_bytes));
    if (*n > left_) return make_error(fmt::format("{} of {} bytes runs past the frame", what, *n));
    std::vector<uint8_t> v(p_, p_ + *n);
    advance(*n);
    return v;
  }
  bool at_end() const { return left_ == 0; }

 private:
  void advance(std::size_t n) {
    p_ += n;
    left_ -= n;
  }
  const uint8_t* p_;
  std::size_t left_;
};

Header make_header(Kind kind, int64_t rank, int64_t world_size, std::size_t payload_bytes) {
  return Header{magic, version, static_cast<uint16_t>(kind), rank, world_size, payload_bytes};
}

Frame finish(Kind kind, int64_t rank, int64_t world_size, Writer& w) {
  Frame f;
  f.payload = w.take();
  f.header = make_header(kind, rank, world_size, f.payload.size());
  return f;
}

}  // namespace

Frame encode_hello(const Hello& hello) {
  Writer w;
  w.blob(hello.token.data(), hello.token.size());
  w.blob(hello.address.data(), hello.address.size());
  w.blob(hello.host.data(), hello.host.size());
  w.process(hello.process);
  return finish(Kind::hello, hello.rank, hello.world_size, w);
}

Frame encode_table(int64_t world_size, const Table& table) {
  Writer w;
  w.u32(static_cast<uint32_t>(table.addresses.size()));
  for (const auto& a : table.addresses) w.blob(a.data(), a.size());
  for (const auto& h : table.hosts) w.blob(h.data(), h.size());
  for (const auto& p : table.processes) w.process(p);
  return finish(Kind::table, 0, world_size, w);
}

Frame encode_reason(Kind kind, int64_t rank, int64_t world_size, const std::string& reason) {
  Writer w;
  w.blob(reason.data(), std::min(reason.size(), reason_bytes_max));
  return finish(kind, rank, world_size, w);
}

Frame encode_message(int64_t rank, int64_t world_size, const std::vector<uint8_t>& bytes) {
  Writer w;
  w.blob(bytes.data(), bytes.size());
  return finish(Kind::message, rank, world_size, w);
}

Result<std::vector<uint8_t>> decode_message(const void* header, std::size_t header_bytes, const void* payload,
                                            std::size_t payload_bytes) {
  TROUPE_TRY(check_header(header, header_bytes, Kind::message, payload_bytes));
  Reader r(payload, payload_bytes);
  auto bytes = r.blob(message_bytes_max, "actor message");
  if (!bytes) return bytes.error();
  if (!r.at_end()) return make_error("message frame has trailing bytes");
  return std::move(*bytes);
}

Status check_header(const void* header, std::size_t header_bytes, Kind expected, std::size_t payload_bytes) {
  if (header == nullptr || header_bytes != sizeof(Header))
    return make_error(fmt::format("frame header of {} bytes, expected {}", header_bytes, sizeof(Header)));
  Header h;
  std::memcpy(&h, header, sizeof h);
  if (h.magic != magic) return make_error("frame with a foreign magic number");
  if (h.version != version)
    return make_error(fmt::format("frame of protocol version {}, this build speaks {}", h.version, version));
  if (h.kind != static_cast<uint16_t>(expected))
    return make_error(
        fmt::format("frame of kind {} on the handler of kind {}", h.kind, static_cast<uint16_t>(expected)));
  if (h.world_size < 1 || h.world_size > world_size_max || h.rank < 0 || h.rank >= h.world_size)
    return make_error(fmt::format("frame from rank {} of world size {}: out of range", h.rank, h.world_size));
  if (h.payload_bytes != payload_bytes)
    return make_error(
        fmt::format("frame announces {} payload bytes but carries {}", h.payload_bytes, payload_bytes));
  return {};
}

int64_t header_rank(const void* header) {
  Header h;
  std::memcpy(&h, header, sizeof h);
  return h.rank;
}

Result<Hello> decode_hello(const void* header, std::size_t header_bytes, const void* payload,
                           std::size_t payload_bytes) {
  TROUPE_TRY(check_header(header, header_bytes, Kind::hello, payload_bytes));
  Header h;
  std::memcpy(&h, header, sizeof h);
  Reader r(payload, payload_bytes);
  auto token = r.blob(token_bytes_max, "token");
  if (!token) return token.error();
  auto address = r.blob(address_bytes_max, "worker address");
  if (!address) return address.error();
  auto host = r.blob(host_bytes_max, "host name");
  if (!host) return host.error();
  auto process = r.process();
  if (!process) return process.error();
  if (!r.at_end()) return make_error("hello frame has trailing bytes");
  if (address->empty()) return make_error("hello frame without a worker address");
  return Hello{h.rank,
               h.world_size,
               std::string(token->begin(), token->end()),
               std::move(*address),
               std::string(host->begin(), host->end()),
               *process};
}

Result<Table> decode_table(const void* header, std::size_t header_bytes, const void* payload,
                           std::size_t payload_bytes) {
  TROUPE_TRY(check_header(header, header_bytes, Kind::table, payload_bytes));
  Header h;
  std::memcpy(&h, header, sizeof h);
  Reader r(payload, payload_bytes);
  auto count = r.u32();
  if (!count) return count.error();
  if (static_cast<int64_t>(*count) != h.world_size)
    return make_error(fmt::format("table of {} addresses for world size {}", *count, h.world_size));
  Table t;
  for (uint32_t i = 0; i < *count; ++i) {
    auto a = r.blob(address_bytes_max, "worker address");
    if (!a) return a.error();
    t.addresses.push_back(std::move(*a));
  }
  for (uint32_t i = 0; i < *count; ++i) {
    auto host = r.blob(host_bytes_max, "host name");
    if (!host) return host.error();
    t.hosts.emplace_back(host->begin(), host->end());
  }
  for (uint32_t i = 0; i < *count; ++i) {
    auto process = r.process();
    if (!process) return process.error();
    t.processes.push_back(*process);
  }
  if (!r.at_end()) return make_error("table frame has trailing bytes");
  return t;
}

Result<std::string> decode_reason(Kind kind, const void* header, std::size_t header_bytes,
                                  const void* payload, std::size_t payload_bytes) {
  TROUPE_TRY(check_header(header, header_bytes, kind, payload_bytes));
  Reader r(payload, payload_bytes);
  auto reason = r.blob(reason_bytes_max, "reason");
  if (!reason) return reason.error();
  if (!r.at_end()) return make_error("reason frame has trailing bytes");
  return std::string(reason->begin(), reason->end());
}

}  // namespace troupe::wire
