#include "sim/services.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "actors/protocol/comm.hpp"
#include "actors/protocol/data.hpp"
#include "sim/messages.hpp"
#include "sim/world.hpp"

namespace troupe::sim {
namespace {

struct Pending {
  std::vector<group_join> joined;
  std::vector<Nanos> joined_at;
};

struct CollectivesState {
  std::map<uint64_t, Pending> pending;
  static inline const char* name = "sim_collectives";
};
using Collectives = caf::stateful_actor<CollectivesState>;

Nanos group_time(const World& w, const group_join& j, bool computing) {
  switch (j.op) {
    case GroupOp::all_reduce:
      return w.links.all_reduce(j.bytes, j.members, computing);
    case GroupOp::reduce_scatter:
      return w.links.reduce_scatter(j.bytes, j.members, computing);
    case GroupOp::all_gather:
      return w.links.all_gather(j.bytes, j.members, computing);
  }
  return 0;
}

// Once every member's progress thread has done its part: the figures, the timeline and
// each member's answer.
void finish(World& w, const std::vector<group_join>& joined, const std::vector<Nanos>& joined_at, Nanos start,
            Nanos end) {
  for (std::size_t i = 0; i < joined.size(); ++i) {
    const group_join& j = joined[i];
    w.figures[static_cast<std::size_t>(j.rank)].exposed += end - joined_at[i];
    w.record(j.rank, Track::collective, j.name, start, end);
    w.clock.at(end, [to = j.reply_to, key = j.key] { caf::anon_send(to, group_done{key}); });
  }
}

// A collective begins once its last member joins, as early as its data allowed (an
// overlapped reduction's buckets went while the backward ran); what is left of it takes
// link time across hosts or devices, or inside one CPU host each member's progress thread
// a share of the host's cores beside the computes there (the reduction and the copies are
// CPU work), ending when the slowest member's does. One that a member runs beside passes of
// the step still to come costs what it was measured to cost beside computes: its hops wait
// for cores they share.
void complete(World& w, Pending& p) {
  const Nanos now = w.clock.now();
  Nanos ready = 0;
  for (const group_join& j : p.joined) ready = std::max(ready, j.earliest);
  const group_join& any = p.joined.front();
  const int64_t host = w.cluster.host_of(any.rank);
  const bool inside_a_cpu_host = w.costs.collective_demand > 0 &&
                                 std::all_of(any.members.begin(), any.members.end(), [&](int64_t member) {
                                   return w.cluster.host_of(member) == host;
                                 });
  const bool computing =
      inside_a_cpu_host &&
      std::any_of(p.joined.begin(), p.joined.end(), [](const group_join& j) { return j.beside_compute; });
  const Nanos took = group_time(w, any, computing);
  const Nanos start = std::max(ready, now - took);  // begun as early as the data allowed, not before
  const Nanos end = std::max(start + took, now + static_cast<Nanos>(static_cast<double>(took) * any.tail));
  const Nanos shown = std::max(start, ready);
  if (!inside_a_cpu_host) return finish(w, p.joined, p.joined_at, shown, end);  // links' time
  auto members = std::make_shared<Pending>(std::move(p));
  auto left = std::make_shared<std::size_t>(members->joined.size());
  for (std::size_t i = 0; i < members->joined.size(); ++i)
    w.hosts[static_cast<std::size_t>(host)]->start(
        end - now,
        [&w, members, left, shown] {
          if (--*left == 0) finish(w, members->joined, members->joined_at, shown, w.clock.now());
        },
        w.costs.collective_demand);
}

caf::behavior collectives(Collectives* self, World* w) {
  return {
      [=](group_join& j) {
        for (int64_t member : j.members)
          if (auto why = w->broken(j.rank, member)) {
            w->fail_after_timeout(fmt::format("rank {} in the {} of ranks [{}]: {}", j.rank, j.name,
                                              fmt::join(j.members, ", "), *why));
            return;
          }
        const uint64_t key = j.key;
        Pending& p = self->state.pending[key];
        p.joined.push_back(std::move(j));
        p.joined_at.push_back(w->clock.now());
        if (p.joined.size() < p.joined.front().members.size()) return;
        complete(*w, p);
        self->state.pending.erase(key);
      },
  };
}

struct WorldCommState {
  std::map<uint64_t, std::vector<all_gather_request>> gathers;
  std::map<uint64_t, std::vector<barrier_request>> barriers;
  static inline const char* name = "sim_world_comm";
};
using WorldComm = caf::stateful_actor<WorldCommState>;

int64_t rank_of(const std::vector<caf::actor>& schedulers, const caf::actor& actor) {
  auto it = std::find(schedulers.begin(), schedulers.end(), actor);
  return it == schedulers.end() ? -1 : static_cast<int64_t>(it - schedulers.begin());
}

// Every rank's input lands in its block of every rank's output, rank order.
void gather_bytes(const std::vector<caf::actor>& schedulers, std::vector<all_gather_request>& requests) {
  std::vector<const all_gather_request*> by_rank(requests.size(), nullptr);
  for (const all_gather_request& r : requests) {
    const int64_t rank = rank_of(schedulers, r.reply_to);
    if (rank >= 0 && static_cast<std::size_t>(rank) < by_rank.size())
      by_rank[static_cast<std::size_t>(rank)] = &r;
  }
  for (const all_gather_request& out : requests) {
    std::byte* to = out.output.data();
    for (const all_gather_request* in : by_rank) {
      if (!in) continue;
      const std::size_t bytes = in->input.count * element_bytes(in->input.type);
      std::memcpy(to, in->input.data(), bytes);
      to += bytes;
    }
  }
}

std::vector<int64_t> everyone(const World& w) {
  std::vector<int64_t> ranks(static_cast<std::size_t>(w.ranks()));
  for (std::size_t r = 0; r < ranks.size(); ++r) ranks[r] = static_cast<int64_t>(r);
  return ranks;
}

caf::behavior world_comm(WorldComm* self, World* w, const std::vector<caf::actor>* schedulers) {
  return {
      [=](all_gather_request& r) {
        auto& list = self->state.gathers[r.tag];
        list.push_back(std::move(r));
        if (static_cast<int64_t>(list.size()) < w->ranks()) return;
        gather_bytes(*schedulers, list);
        const int64_t bytes =
            static_cast<int64_t>(list.front().output.count * element_bytes(list.front().output.type));
        const Nanos took = w->links.all_gather(bytes, everyone(*w));
        for (const all_gather_request& done : list)
          w->clock.after(took, [to = done.reply_to, tag = done.tag] {
            caf::anon_send(to, collective_done{tag, ""});
          });
        self->state.gathers.erase(list.front().tag);
      },
      [=](barrier_request& r) {
        auto& list = self->state.barriers[r.tag];
        list.push_back(std::move(r));
        if (static_cast<int64_t>(list.size()) < w->ranks()) return;
        for (const barrier_request& done : list) caf::anon_send(done.reply_to, collective_done{done.tag, ""});
        self->state.barriers.erase(list.front().tag);
      },
  };
}

caf::behavior data_loader(caf::event_based_actor*, World* w) {
  return {
      [=](const fetch_micro_batch& f) {
        return micro_batch_ready{f.step, f.micro, nullptr, w->costs.micro_tokens};
      },
  };
}

}  // namespace

caf::actor spawn_collectives(caf::actor_system& system, World& world) {
  return system.spawn(collectives, &world);
}

caf::actor spawn_world_comm(caf::actor_system& system, World& world,
                            const std::vector<caf::actor>* schedulers) {
  return system.spawn(world_comm, &world, schedulers);
}

caf::actor spawn_sim_data_loader(caf::actor_system& system, World& world) {
  return system.spawn(data_loader, &world);
}

}  // namespace troupe::sim
