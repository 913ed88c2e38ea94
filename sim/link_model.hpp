// What moving bytes costs on a simulated cluster: a message between two ranks, and the
// collectives of a group, from the cluster's links (cluster.hpp).
//
// A message takes latency + bytes / bandwidth on the host link when both ends share a
// host, on one network rail otherwise. Collectives run as rings (Patarasuk and Yuan's
// bandwidth-optimal all-reduce: each member moves 2 (n − 1)/n of the buffer), and
// hierarchically when the group spans hosts with several members on each: a reduce-scatter
// inside each host, then across hosts on each member's 1/L of the buffer (every local
// member on its own rail, so the rails run side by side), then an all-gather inside the
// host; NCCL's tree/ring and troupe's two-level all-reduce both take this shape. Ranks of a
// host that outnumber its rails share them. Where the host's collectives were measured
// (a CPU host's device file), a pass inside the host takes its measured bus bandwidth
// instead of the link's: the reduction and the copies cost more than the bytes' transfer.
// Measured with as many ranks as the pass has where it can be: on a host whose ranks
// outnumber its cores, each hop waits for a rank to get a core back (0.4 GB/s with 4 ranks
// on 2 cores here against 4.3 with 2).
// Thread safety: const methods only.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/cluster.hpp"
#include "sim/virtual_clock.hpp"

namespace troupe::sim {

class LinkModel {
 public:
  explicit LinkModel(const ClusterSpec& cluster);

  Nanos point_to_point(int64_t bytes, int64_t from, int64_t to) const;
  /// `bytes`: the whole buffer every member holds. `computing`: the ranks of the host
  /// compute meanwhile, so a CPU host's collective inside it takes the figure measured that
  /// way where there is one (LinkSpec::collective_busbw_beside_compute).
  Nanos all_reduce(int64_t bytes, const std::vector<int64_t>& group, bool computing = false) const;
  /// `bytes`: the whole buffer; each member ends with 1/n of it.
  Nanos reduce_scatter(int64_t bytes, const std::vector<int64_t>& group, bool computing = false) const;
  /// `bytes`: the whole gathered buffer.
  Nanos all_gather(int64_t bytes, const std::vector<int64_t>& group, bool computing = false) const;

 private:
  struct Span {
    int64_t hosts = 1;  // hosts the group touches
    int64_t local = 1;  // members on the most crowded of them
  };
  Span span(const std::vector<int64_t>& group) const;
  double ring_seconds(double bytes, int64_t members, const LinkSpec& link) const;
  /// One pass of `op` over `members` of one host: at its measured bus bandwidth when known.
  double inside_seconds(const char* op, double bytes, int64_t members, bool computing) const;
  double measured_busbw(const char* op, int64_t members, bool computing) const;
  /// Whether the host's ranks outnumber its cores (a measured CPU host's).
  bool crowded() const;
  Nanos collective(const char* op, int64_t bytes, const std::vector<int64_t>& group, bool computing) const;
  LinkSpec network_per_rank() const;

  ClusterSpec cluster_;
};

}  // namespace troupe::sim
