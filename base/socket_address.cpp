#include "base/socket_address.hpp"

#include <netdb.h>
#include <netinet/in.h>

#include <cstring>

#include <fmt/format.h>

namespace troupe {

Result<SocketAddress> resolve_socket_address(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;  // to say so of a host that has only IPv6 addresses
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr)
    return make_error(fmt::format("cannot resolve coordinator host {}: {}", host, gai_strerror(rc)));
  const addrinfo* chosen = nullptr;
  for (const addrinfo* a = found; a != nullptr && chosen == nullptr; a = a->ai_next)
    if (a->ai_family == AF_INET) chosen = a;
  if (chosen == nullptr) {
    freeaddrinfo(found);
    return make_error(fmt::format(
        "coordinator host {} has only an IPv6 address, and troupe's bootstrap runs over IPv4 (UCX 1.13's "
        "TCP transport cannot complete a connection accepted on IPv6): give rank 0's IPv4 address or a "
        "host name that has one",
        host));
  }
  SocketAddress address;
  std::memcpy(&address.storage, chosen->ai_addr, chosen->ai_addrlen);
  address.length = chosen->ai_addrlen;
  freeaddrinfo(found);
  reinterpret_cast<sockaddr_in*>(&address.storage)->sin_port = htons(port);
  return address;
}

}  // namespace troupe
