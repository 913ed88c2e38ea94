#include "transport/transport_impl.hpp"

namespace troupe {

// Groups the ranks by host. Every rank registers the same communicators in the same
// order — one per host, then one per local position across hosts — from the table that
// every rank received, so no agreement round is needed.
Status Transport::Impl::plan_topology(const std::vector<std::string>& hosts) {
  std::vector<std::string> order;
  std::vector<std::vector<int64_t>> ranks_of;
  for (int64_t r = 0; r < options_.world_size; ++r) {
    auto it = std::find(order.begin(), order.end(), hosts[static_cast<std::size_t>(r)]);
    if (it == order.end()) {
      order.push_back(hosts[static_cast<std::size_t>(r)]);
      ranks_of.emplace_back();
      it = order.end() - 1;
    }
    ranks_of[static_cast<std::size_t>(it - order.begin())].push_back(r);
  }
  std::size_t local = ranks_of[0].size();
  bool even = std::all_of(ranks_of.begin(), ranks_of.end(), [&](const auto& v) { return v.size() == local; });
  bool fits = order.size() + local + 1 <= communicators_max;
  bool useful = order.size() > 1 && local > 1;
  if (options_.topology == Topology::flat ||
      (options_.topology == Topology::automatic && !(even && fits && useful)))
    return {};
  if (!even || !fits)
    return make_error(
        fmt::format("two-level topology needs the same number of ranks on every host (and at most {} "
                    "hosts plus ranks per host); {} hosts have {} to {} ranks",
                    communicators_max - 1, order.size(), local,
                    std::max_element(ranks_of.begin(), ranks_of.end(), [](const auto& a, const auto& b) {
                      return a.size() < b.size();
                    })->size()));
  two_level_ = TwoLevel{};
  for (const auto& members : ranks_of) {
    CommunicatorId id = add_communicator(members);
    if (position_in(id) >= 0) two_level_->local = id;
  }
  for (std::size_t i = 0; i < local; ++i) {
    std::vector<int64_t> members;
    for (const auto& on_host : ranks_of) members.push_back(on_host[i]);
    CommunicatorId id = add_communicator(members);
    if (position_in(id) >= 0) two_level_->cross = id;
  }
  spdlog::debug("transport: two-level all-reduce over {} hosts of {} ranks", order.size(), local);
  return {};
}

// Reduce-scatter within the host, all-reduce of this rank's segment across hosts,
// all-gather within the host. The three sequence numbers are taken now, so that calls
// issued later cannot overtake on one communicator what they follow on another.
void Transport::Impl::issue_two_level_all_reduce(void* data, std::size_t count, DataType type, ReduceOp op,
                                                 Completion done) {
  auto scatter = next_shape(two_level_->local, describe_call("all_reduce.local", type, count, 0, op));
  auto across = next_shape(two_level_->cross, describe_call("all_reduce.hosts", type, count, 0, op));
  auto gather = next_shape(two_level_->local, describe_call("all_reduce.gather", type, count, 0, op));
  if (!scatter || !across || !gather) return done(make_error("two-level communicators are missing"));
  auto segment = ring::segment(count, scatter->world_size, scatter->rank);
  auto* mine = static_cast<std::byte*>(data) + segment.begin * element_bytes(type);
  float average = op == ReduceOp::average ? 1.0f / static_cast<float>(options_.world_size) : 0.0f;
  Completion after_across = [=, gather = *gather](Status s) mutable {
    if (!s) return done(s);
    if (average != 0.0f) kernels::scale(mine, segment.count, average, type);  // identical bits on every host
    issue(gather, make_all_gather_segments(gather, data, count, type), std::move(done));
  };
  Completion after_scatter = [=, across = *across](Status s) mutable {
    if (!s) return after_across(s);
    issue(across, make_all_reduce(across, mine, segment.count, type, ReduceOp::sum), std::move(after_across));
  };
  issue(*scatter, make_reduce_scatter_segments(*scatter, data, count, type, ReduceOp::sum),
        std::move(after_scatter));
}

}  // namespace troupe
