// The cluster a job is simulated on (`troupe simulate FILE --cluster CLUSTER.toml`):
// hosts of ranks (one device each), the links between them, how compute is costed, and the
// faults to inject.
//
//   [cluster]
//   hosts = 128             # machines
//   ranks_per_host = 8      # devices per machine, one rank each, packed in rank order
//   device = "h200-sxm"     # a preset, or a device file (troupe profile-device --json > F)
//   compute = "flops"       # "flops": FLOPs / (device GEMM rate × efficiency);
//                           # "measured": the job's layers timed on this machine
//   efficiency = 0.55       # flops only: the share of the GEMM rate the layers reach
//   seed = 1                # for jitter and the random faults
//   jitter = 0.0            # each compute takes (1 ± jitter) × its cost, seeded
//                           # (compute = "measured" replays the measured passes instead)
//   peer_timeout_s = 10     # how long a lost peer is waited for before the job stops
//
//   [links.host]            # within a host (NVLink; shared memory on a CPU host)
//   bandwidth_gbs = 450     # GB/s per direction; 0: the device file's transport figure
//   latency_us = 3
//
//   [links.network]         # between hosts, per rail; each rank of a host has its own rail
//   rails = 8
//   bandwidth_gbs = 50
//   latency_us = 5
//
//   [[faults]]              # kind = "slow_rank" (rank, factor), "lost_link" (rank, peer,
//   kind = "slow_rank"      # at_ms), "dead_rank" (rank, at_ms) or "random_slow" (count,
//   rank = 17               # factor: `count` ranks the seed picks)
//   factor = 1.5
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "sim/device.hpp"

namespace troupe::sim {

struct LinkSpec {
  double bandwidth = 0;  ///< bytes/s per direction
  double latency_s = 0;  ///< one message's fixed cost
  /// Measured bus bandwidths of the collectives over this link by name ("all_reduce",
  /// "reduce_scatter", "all_gather"); empty: rings at `bandwidth`.
  std::map<std::string, double> collective_busbw;
  /// Measured with more ranks of the host than two, by their number (DeviceSpec's).
  std::map<int64_t, std::map<std::string, double>> collective_busbw_by_ranks;
  int64_t cores = 0;  ///< the host's cores, which those ranks shared; 0: a device each
  /// A tensor transfer's fixed cost between two ranks of the host, by the host's rank count
  /// measured (DeviceSpec's); empty: latency_s.
  std::map<int64_t, double> hop_latency_by_ranks;
  /// Measured between two ranks that compute meanwhile (DeviceSpec's); empty: as when idle.
  std::map<std::string, double> collective_busbw_beside_compute;
};

enum class FaultKind { slow_rank, lost_link, dead_rank };

struct Fault {
  FaultKind kind = FaultKind::slow_rank;
  int64_t rank = 0;
  int64_t peer = -1;   ///< lost_link: the other end
  double factor = 1;   ///< slow_rank: compute takes factor × its cost
  double at_s = 0;     ///< lost_link, dead_rank: when, in the job's virtual time
  std::string origin;  ///< "cluster.toml:12:1", for messages
};

struct ClusterSpec {
  std::string source;  ///< the file
  int64_t hosts = 1;
  int64_t ranks_per_host = 1;
  DeviceSpec device;
  std::string compute = "flops";
  double efficiency = 0.5;
  uint64_t seed = 1;
  double jitter = 0;
  /// compute = "measured": by measuring process (they ran at once, as the host's ranks
  /// will), its timed passes in the order they ran, each forward and backward over its
  /// median. Rank r replays process r mod n's, each compute the next pass, in place of
  /// `jitter`: bursts of a slow machine stay bursts, and ranks drift apart as the processes
  /// did. Not read from the file: `troupe simulate` measures it with the layers.
  std::vector<std::vector<double>> noise;
  double peer_timeout_s = 10;
  LinkSpec host;
  LinkSpec network;
  int64_t rails = 1;
  std::vector<Fault> faults;  ///< random_slow already drawn into slow_rank faults

  int64_t world() const { return hosts * ranks_per_host; }
  int64_t host_of(int64_t rank) const { return rank / ranks_per_host; }
};

/// Reads a cluster file. An error names the file, the line and the key, and what is allowed.
/// A device that names a file is read relative to the cluster file's folder.
Result<ClusterSpec> load_cluster_file(const std::string& path);
/// Parses cluster text (for tests): `source` names it in messages; device files relative to `folder`.
Result<ClusterSpec> parse_cluster(const std::string& text, const std::string& source,
                                  const std::string& folder);

}  // namespace troupe::sim
