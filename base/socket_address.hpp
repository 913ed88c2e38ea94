// A coordinator's socket address from its host and port: an IPv4 address as written, or a
// host name's IPv4 address. An IPv6 one ("::1", "fd00::1", a name with only those) is
// refused saying why: the bootstrap connects over UCX 1.13's TCP transport, whose connection
// accepted on an IPv6 address connects back to the joining rank's IPv4 interface address
// and fails (tried on loopback, 2026-12-06, with UCX_TCP_AF_PRIO inet6 and inet6,inet too).
// Thread safety: pure (getaddrinfo).
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>

#include "base/result.hpp"

namespace troupe {

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
  int family() const { return storage.ss_family; }
};

/// Fails with "cannot resolve coordinator host HOST: why", or naming the IPv6 address.
Result<SocketAddress> resolve_socket_address(const std::string& host, uint16_t port);

}  // namespace troupe
