#include "sim/link_model.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <string_view>

namespace troupe::sim {

LinkModel::LinkModel(const ClusterSpec& cluster) : cluster_(cluster) {}

LinkModel::Span LinkModel::span(const std::vector<int64_t>& group) const {
  std::map<int64_t, int64_t> per_host;
  for (int64_t rank : group) ++per_host[cluster_.host_of(rank)];
  Span s;
  s.hosts = static_cast<int64_t>(per_host.size());
  for (const auto& [host, count] : per_host) s.local = std::max(s.local, count);
  return s;
}

// Ranks of a host beyond its rails take turns on them.
LinkSpec LinkModel::network_per_rank() const {
  LinkSpec link = cluster_.network;
  const int64_t sharing =
      std::max<int64_t>(1, cluster_.ranks_per_host / std::max<int64_t>(1, cluster_.rails));
  link.bandwidth /= static_cast<double>(sharing);
  return link;
}

// One pass (a reduce-scatter or an all-gather) of `bytes` over `members`: a ring's n − 1
// hops, each moving 1/n of the buffer; a small buffer goes down and up a binary tree
// instead (2·⌈log2 n⌉ hops of the whole buffer) when that is quicker, as NCCL chooses.
double LinkModel::ring_seconds(double bytes, int64_t members, const LinkSpec& link) const {
  if (members <= 1) return 0;
  const double n = static_cast<double>(members);
  const double ring = (n - 1) * link.latency_s + (n - 1) / n * bytes / link.bandwidth;
  const double tree = std::ceil(std::log2(n)) * (link.latency_s + bytes / link.bandwidth);
  return std::min(ring, tree);
}

bool LinkModel::crowded() const {
  return cluster_.host.cores > 0 && cluster_.ranks_per_host > cluster_.host.cores;
}

Nanos LinkModel::point_to_point(int64_t bytes, int64_t from, int64_t to) const {
  const bool same_host = cluster_.host_of(from) == cluster_.host_of(to);
  const LinkSpec link = same_host ? cluster_.host : network_per_rank();
  double latency = link.latency_s;
  // A stage's tensor crosses the host as a handshake of wake-ups (a crowded host's receiver
  // also waits for a core): the fixed cost measured with as many ranks on the host, or the
  // nearest count above, else the most measured.
  if (same_host && !link.hop_latency_by_ranks.empty()) {
    auto at = link.hop_latency_by_ranks.lower_bound(cluster_.ranks_per_host);
    latency = at == link.hop_latency_by_ranks.end() ? link.hop_latency_by_ranks.rbegin()->second : at->second;
  }
  return seconds_to_nanos(latency + static_cast<double>(bytes) / link.bandwidth);
}

// A reduce-scatter or an all-gather moves (n − 1)/n of the buffer per member, an all-reduce
// twice that (nccl-tests' busbw conventions).
// The host's measured bus bandwidth of `op` among `members`, at full speed; 0 when none was
// measured. A figure taken with more ranks than cores ran each member at cores / ranks of a
// core, which the simulated host applies itself (its collectives share its processors), so
// that part is taken out. Between the rank counts measured the cost of a byte is
// interpolated; beyond the last, the last's. With `computing` the two ranks' figure is the one
// measured beside a busy core each, whose threads (a progress thread and a computing one per
// rank) shared the cores the same way.
double LinkModel::measured_busbw(const char* op, int64_t members, bool computing) const {
  std::map<int64_t, double> per_byte;  // seconds per byte of bus traffic, by rank count
  auto take = [&](int64_t ranks, const std::map<std::string, double>& figures, int64_t threads_each = 1) {
    auto f = figures.find(op);
    if (f == figures.end() || f->second <= 0) return false;
    const int64_t threads = ranks * threads_each;
    const double shared = cluster_.host.cores > 0 && threads > cluster_.host.cores
                              ? static_cast<double>(cluster_.host.cores) / static_cast<double>(threads)
                              : 1.0;
    per_byte[ranks] = shared / f->second;
    return true;
  };
  if (!computing || !take(2, cluster_.host.collective_busbw_beside_compute, 2))
    take(2, cluster_.host.collective_busbw);
  for (const auto& [ranks, figures] : cluster_.host.collective_busbw_by_ranks) take(ranks, figures);
  if (per_byte.empty()) return 0;
  auto above = per_byte.lower_bound(members);
  if (above == per_byte.end()) return 1 / std::prev(above)->second;
  if (above->first == members || above == per_byte.begin()) return 1 / above->second;
  const auto below = std::prev(above);
  const double t =
      static_cast<double>(members - below->first) / static_cast<double>(above->first - below->first);
  return 1 / (below->second + t * (above->second - below->second));
}

double LinkModel::inside_seconds(const char* op, double bytes, int64_t members, bool computing) const {
  if (members <= 1) return 0;
  // On a host whose ranks outnumber its cores every collective is a crowded one, whatever
  // its group: its members wait for cores the host's other ranks hold, and the runtime
  // stops polling there (engine.cpp), so each hop waits for a wake-up; that figure is taken
  // beside computes too.
  const double busbw = crowded() ? measured_busbw(op, std::max(members, cluster_.ranks_per_host), false)
                                 : measured_busbw(op, members, computing);
  if (busbw <= 0) {
    const double pass = ring_seconds(bytes, members, cluster_.host);
    return std::string_view(op) == "all_reduce" ? 2 * pass : pass;
  }
  const double n = static_cast<double>(members);
  const double moved = (std::string_view(op) == "all_reduce" ? 2 : 1) * (n - 1) / n * bytes;
  return (n - 1) * cluster_.host.latency_s + moved / busbw;
}

Nanos LinkModel::collective(const char* op, int64_t bytes, const std::vector<int64_t>& group,
                            bool computing) const {
  if (group.size() <= 1) return 0;
  const Span s = span(group);
  const double b = static_cast<double>(bytes);
  const double passes = std::string_view(op) == "all_reduce" ? 2 : 1;
  if (s.hosts == 1) return seconds_to_nanos(inside_seconds(op, b, s.local, computing));
  if (s.local == 1) return seconds_to_nanos(passes * ring_seconds(b, s.hosts, network_per_rank()));
  // Inside each host, then 1/L of the buffer across hosts, then (all-reduce) back inside.
  const double across = ring_seconds(b / static_cast<double>(s.local), s.hosts, network_per_rank());
  return seconds_to_nanos(inside_seconds(op, b, s.local, computing) + passes * across);
}

Nanos LinkModel::reduce_scatter(int64_t bytes, const std::vector<int64_t>& group, bool computing) const {
  return collective("reduce_scatter", bytes, group, computing);
}

Nanos LinkModel::all_gather(int64_t bytes, const std::vector<int64_t>& group, bool computing) const {
  return collective("all_gather", bytes, group, computing);
}

Nanos LinkModel::all_reduce(int64_t bytes, const std::vector<int64_t>& group, bool computing) const {
  return collective("all_reduce", bytes, group, computing);
}

}  // namespace troupe::sim
