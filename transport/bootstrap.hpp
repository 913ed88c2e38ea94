// Bootstrap over a plain TCP socket (IPv4 or IPv6): rank 0 listens on the coordinator's
// address; every other rank connects, presents the cluster token and its UCX worker
// address; once all have joined, rank 0 sends everyone the table of worker addresses and
// the sockets close. From then on ranks reach each other by worker address over UCX alone.
// No TCP store, no MPI.
//
// Why not UCX's own client-server connections: UCX 1.13's TCP connection manager accepts
// on an IPv6 listener, then connects back to the joining rank's interface with the port of
// its IPv4 listener and fails (docs/DESIGN.md), so only a socket of troupe's own serves
// clusters that address rank 0 by IPv6.
//
// Runs on the thread that will own the worker, before its progress loop starts;
// every wait is bounded by bootstrap_timeout_s.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "transport/options.hpp"
#include "transport/ucx_worker.hpp"
#include "transport/wire.hpp"

namespace troupe {

/// Every rank's worker address, host and process, indexed by rank.
struct AddressTable {
  std::vector<std::vector<uint8_t>> addresses;
  std::vector<std::string> hosts;
  std::vector<wire::ProcessId> processes;
};

/// Joins the cluster described by `options`; returns the address table.
Result<AddressTable> bootstrap(UcxWorker& worker, const TransportOptions& options);

/// This machine's identity: options.host_id when set, else host name and boot id.
std::string host_identity(const TransportOptions& options);

}  // namespace troupe
