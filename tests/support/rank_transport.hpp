// The transport of a test's rank program started by `troupe launch`: rank and world from
// TROUPE_RANK / TROUPE_WORLD_SIZE, the coordinator on this host at `port`, 30 s bounds.
// The error is printed with the rank; null then.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "transport/transport.hpp"

namespace troupe::testing {

inline std::shared_ptr<Transport> launched_rank_transport(const char* port) {
  TransportOptions o;
  o.rank = std::atoll(std::getenv("TROUPE_RANK"));
  o.world_size = std::atoll(std::getenv("TROUPE_WORLD_SIZE"));
  o.coordinator_port = static_cast<uint16_t>(std::atoi(port));
  o.bootstrap_timeout_s = 30;
  o.collective_timeout_s = 30;
  auto transport = Transport::make(o);
  if (!transport) {
    std::fprintf(stderr, "rank %lld: %s\n", static_cast<long long>(o.rank),
                 transport.error().message.c_str());
    return nullptr;
  }
  return std::shared_ptr<Transport>(std::move(*transport));
}

}  // namespace troupe::testing
