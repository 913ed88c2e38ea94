#include "base/socket_address.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <cstring>

#include <fmt/format.h>

namespace troupe {

std::string SocketAddress::text() const {
  char host[INET6_ADDRSTRLEN] = {};
  if (family() == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&storage);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    return fmt::format("[{}]:{}", host, ntohs(a->sin6_port));
  }
  const auto* a = reinterpret_cast<const sockaddr_in*>(&storage);
  inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
  return fmt::format("{}:{}", host, ntohs(a->sin_port));
}

std::string host_port_text(const std::string& host, int64_t port) {
  const bool bare_ipv6 = host.find(':') != std::string::npos && host.front() != '[';
  return bare_ipv6 ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
}

Result<std::vector<SocketAddress>> resolve_socket_addresses(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0 || found == nullptr)
    return make_error(fmt::format("cannot resolve coordinator host {}: {}", host, gai_strerror(rc)));
  std::vector<SocketAddress> addresses;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family != AF_INET && a->ai_family != AF_INET6) continue;
    SocketAddress address;
    std::memcpy(&address.storage, a->ai_addr, a->ai_addrlen);
    address.length = a->ai_addrlen;
    addresses.push_back(address);
  }
  freeaddrinfo(found);
  if (addresses.empty())
    return make_error(
        fmt::format("cannot resolve coordinator host {}: it has no IPv4 or IPv6 address", host));
  return addresses;
}

}  // namespace troupe
