// A coordinator's socket addresses from its host and port: an IPv4 or IPv6 address as
// written, or every address a host name resolves to, in the resolver's order (rank 0
// listens on each it can bind; a joining rank tries each in turn, so a name whose IPv6 and
// IPv4 addresses reach the same machine works whichever one the two ends prefer).
// Thread safety: pure (getaddrinfo).
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.hpp"

namespace troupe {

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
  int family() const { return storage.ss_family; }
  /// "127.0.0.1:29500" or "[::1]:29500".
  std::string text() const;
};

/// "HOST:PORT", an IPv6 host bracketed ("[::1]:29500") unless it already is.
std::string host_port_text(const std::string& host, int64_t port);

/// At least one address, or fails with "cannot resolve coordinator host HOST: why".
Result<std::vector<SocketAddress>> resolve_socket_addresses(const std::string& host, uint16_t port);

}  // namespace troupe
