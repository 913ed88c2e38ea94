// Bootstrap over UCX itself: rank 0 listens on the coordinator address; every other
// rank connects, presents the cluster token and its worker address; once all have
// joined, rank 0 sends everyone the table of worker addresses. No TCP store, no MPI.
//
// Runs on the thread that will own the worker, before its progress loop starts;
// every wait is bounded by bootstrap_timeout_s.
#pragma once

#include <cstdint>
#include <vector>

#include "base/result.hpp"
#include "transport/options.hpp"
#include "transport/ucx_worker.hpp"

namespace troupe {

/// Every rank's worker address and host, indexed by rank.
struct AddressTable {
  std::vector<std::vector<uint8_t>> addresses;
  std::vector<std::string> hosts;
};

/// Joins the cluster described by `options`; returns the address table.
Result<AddressTable> bootstrap(UcxWorker& worker, const TransportOptions& options);

/// This machine's identity: options.host_id when set, else host name and boot id.
std::string host_identity(const TransportOptions& options);

}  // namespace troupe
