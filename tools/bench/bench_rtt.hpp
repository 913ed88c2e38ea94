// `troupe bench rtt`: the round trip of an actor message between two ranks — rank 0's
// pinger sends through its comm agent to rank 1's echo actor, which answers the same
// way — reported as median and 99th percentile over many round trips, beside the
// machine's cost of waking sleeping threads, measured in the same run. With more ranks
// than two the others compute (spin) meanwhile, and where the ranks outnumber the cores
// the transport does not poll, as in a real job on such a host.
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
  /// The machine's floor, measured in the same run: the median round trip of two threads
  /// of one process handing a token back and forth through a condition variable, each
  /// asleep until woken. An actor round trip between ranks wakes at least that many
  /// sleeping threads (the pinger, and on the far side the actor the message is for).
  double wake_pair_us = 0;
};

/// The median of `count` condition-variable round trips between two threads, in µs.
double measure_wake_pair(int64_t count);

/// A tensor's round trips between ranks 0 and 1 through the transport, as pipeline stages
/// pass activations and gradients: each side's receive posted ahead, its completion waking
/// a thread that computes (holds a core) for `compute_ms` and then sends the answer; the
/// samples are the round trips less the two computes. Any further rank keeps a core busy
/// meanwhile. Rank 0 returns the figures (no wake_pair_us), the others an empty RoundTrips.
Result<RoundTrips> measure_tensor_hops(Transport& transport, int64_t bytes, int64_t round_trips,
                                       double compute_ms);

/// Runs on every rank; rank 0 returns the figures, the others an empty RoundTrips. Ranks 0
/// and 1 take turns; any further rank keeps a core busy meanwhile (a crowded host: its
/// ranks compute while two of them exchange activations).
Result<RoundTrips> measure_round_trips(std::shared_ptr<Transport> transport, int64_t payload_bytes,
                                       double seconds);

}  // namespace troupe
