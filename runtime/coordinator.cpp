#include "runtime/coordinator.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "base/socket_address.hpp"

namespace troupe {

Result<HostPort> parse_host_port(const std::string& text, const std::string& what) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    return make_error(fmt::format("{} \"{}\" is not HOST:PORT", what, text));
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  std::string port_text = text.substr(colon + 1);
  char* end = nullptr;
  long port = std::strtol(port_text.c_str(), &end, 10);
  if (*end != '\0' || port < 1 || port > 65535)
    return make_error(fmt::format("{} \"{}\": port must be 1-65535", what, text));
  return HostPort{host, static_cast<uint16_t>(port)};
}

bool ranks_fit_cores(int64_t local_ranks) {
  return local_ranks <= static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
}

// Rank 0 will listen on every address the host resolves to that this machine holds; the
// port must be free on each.
Status check_port_free(const HostPort& address) {
  auto addresses = resolve_socket_addresses(address.host, address.port);
  if (!addresses) return addresses.error();
  int bound = 0;
  for (const SocketAddress& a : *addresses) {
    int fd = socket(a.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return make_error("cannot create a socket to check the coordinator port");
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (a.family() == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    int rc = bind(fd, a.get(), a.length);
    int err = errno;
    close(fd);
    bound += rc == 0;
    if (rc == 0 || err == EADDRNOTAVAIL) continue;  // not this machine's address: rank 0 skips it too
    return make_error(fmt::format(
        "coordinator {} cannot be used: {}{}", a.text(), std::strerror(err),
        err == EADDRINUSE ? "; choose a free port with --set cluster.coordinator=HOST:PORT" : ""));
  }
  if (bound == 0)
    return make_error(fmt::format("coordinator {}:{} is not an address of this machine, where rank 0 listens",
                                  address.host, address.port));
  return {};
}

}  // namespace troupe
