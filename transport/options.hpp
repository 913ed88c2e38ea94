// Options of the transport of one rank: who it is, where the coordinator listens,
// the shared token, and the bound on every wait.
#pragma once

#include <cstdint>
#include <string>

#include "base/trace.hpp"

namespace troupe {

/// How all-reduce uses the machines: flat ring over every rank, or two-level
/// (within each host, then across hosts, then within each host again).
enum class Topology { automatic, flat, two_level };

struct TransportOptions {
  int64_t rank = 0;
  int64_t world_size = 1;
  std::string coordinator_host = "127.0.0.1";
  uint16_t coordinator_port = 29500;
  std::string coordinator_source = "[cluster] coordinator";  ///< where the address came from, for errors
  std::string token = "troupe";
  double bootstrap_timeout_s = 60;      ///< rank 0 waits this long for every rank to join
  double peer_timeout_s = 10;           ///< silence after which a peer counts as lost
  double collective_timeout_s = 120;    ///< bound on one collective, start to finish
  std::size_t chunk_bytes = 256 << 10;  ///< pipelining unit of ring collectives
  std::size_t chunks_in_flight = 8;     ///< chunks of one collective moving at once
  /// Polling before the progress thread sleeps while operations are in flight: saves
  /// wake-ups when every rank has a core; 0 when ranks outnumber cores (it would steal them).
  int poll_before_sleep_us = 50;
  /// Identity of this machine; empty = host name and boot id. Ranks with equal ids share memory.
  std::string host_id;
  /// automatic: two-level when there are several hosts with equal numbers of ranks, several per host.
  Topology topology = Topology::automatic;
  /// Optional, must outlive the transport: each collective that succeeds is recorded on
  /// the "comm" track from the moment its first chunk was received to the moment it
  /// completed, so the span is time bytes were arriving: never time it sat queued, nor
  /// time its own eager sends finished while the peer was still elsewhere.
  Tracer* tracer = nullptr;
};

}  // namespace troupe
