// `troupe bench rtt`: the round trip of an actor message between two ranks — rank 0's
// pinger sends through its comm agent to rank 1's echo actor, which answers the same
// way — reported as median and 99th percentile over many round trips.
#pragma once

#include <cstdint>
#include <memory>

#include "base/result.hpp"
#include "transport/transport.hpp"

namespace troupe {

struct RoundTrips {
  int64_t samples = 0;
  double median_us = 0;
  double p99_us = 0;
};

/// Runs on both ranks; rank 0 returns the figures, rank 1 an empty RoundTrips.
Result<RoundTrips> measure_round_trips(std::shared_ptr<Transport> transport, int64_t payload_bytes,
                                       double seconds);

}  // namespace troupe
