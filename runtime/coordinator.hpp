// Parsing of "host:port" coordinator addresses.
#pragma once

#include <cstdint>
#include <string>

#include "base/result.hpp"

namespace troupe {

struct HostPort {
  std::string host;
  uint16_t port = 0;
};

/// Splits "host:port" (or "[v6]:port"); the error names `what` (e.g. "[cluster] coordinator").
Result<HostPort> parse_host_port(const std::string& text, const std::string& what);

/// Whether `local_ranks` processes on this host each get a core of their own.
bool ranks_fit_cores(int64_t local_ranks);

/// Fails with a clear sentence when nothing can listen on `address` (port in use).
Status check_port_free(const HostPort& address);

}  // namespace troupe
