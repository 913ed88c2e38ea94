#include "sim/world.hpp"

#include <fmt/format.h>

#include "runtime/data/splitmix.hpp"

namespace troupe::sim {

void RankStream::enqueue(Nanos cost, std::string name, Done done, std::vector<TimelineEvent>* timeline,
                         int64_t rank, std::function<void()> started) {
  waiting_.push_back(Work{cost, std::move(name), std::move(done), timeline, rank, std::move(started)});
  if (!busy_) start_next();
}

void RankStream::start_next() {
  if (waiting_.empty()) {
    busy_ = false;
    return;
  }
  busy_ = true;
  auto work = std::make_shared<Work>(std::move(waiting_.front()));
  waiting_.pop_front();
  const Nanos start = clock_->now();
  if (work->started) work->started();
  host_->start(work->cost, [this, work, start] {
    if (work->timeline)
      work->timeline->push_back(TimelineEvent{work->rank, Track::compute, work->name, start, clock_->now()});
    work->done(start);
    start_next();
  });
}

World::World(JobConfig job_, ClusterSpec cluster_, JobCosts costs_, bool tracing_)
    : job(std::move(job_)),
      cluster(std::move(cluster_)),
      costs(std::move(costs_)),
      links(cluster),
      tracing(tracing_) {
  grid = pipeline::Grid{job.parallel.dp, job.parallel.pp, job.parallel.order, job.parallel.tp};
  for (int64_t h = 0; h < cluster.hosts; ++h)
    hosts.push_back(std::make_unique<SharedProcessors>(clock, costs.host_capacity));
  const int64_t n = ranks();
  slow_.assign(static_cast<std::size_t>(n), 1.0);
  draws_.assign(static_cast<std::size_t>(n), 0);
  figures.resize(static_cast<std::size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    streams.push_back(
        std::make_unique<RankStream>(clock, *hosts[static_cast<std::size_t>(cluster.host_of(r))]));
    ledgers.push_back(std::make_shared<MemoryLedger>());
    places.push_back(*pipeline::place(grid, r));
  }
  for (const Fault& f : cluster.faults)
    if (f.kind == FaultKind::slow_rank) slow_[static_cast<std::size_t>(f.rank)] *= f.factor;
}

Nanos World::compute_cost(int64_t rank, Nanos base) {
  double factor = slow_[static_cast<std::size_t>(rank)];
  const uint64_t nth = draws_[static_cast<std::size_t>(rank)]++;
  if (!cluster.noise.empty()) {
    // Ranks that replay different processes start at the same pass, as the processes ran
    // side by side; the seed picks where each group of them starts.
    const std::size_t copies = cluster.noise.size();
    const std::vector<double>& passes = cluster.noise[static_cast<std::size_t>(rank) % copies];
    if (!passes.empty()) {
      const uint64_t group = static_cast<uint64_t>(rank) / copies;
      const uint64_t start = splitmix_at(cluster.seed, group) % passes.size();
      factor *= passes[static_cast<std::size_t>((start + nth) % passes.size())];
    }
  } else if (cluster.jitter > 0) {
    const uint64_t draw = splitmix_at(cluster.seed ^ (static_cast<uint64_t>(rank) << 20), nth);
    const double unit = static_cast<double>(draw >> 11) / 9007199254740992.0;  // [0, 1)
    factor *= 1 + cluster.jitter * (2 * unit - 1);
  }
  return static_cast<Nanos>(static_cast<double>(base) * factor);
}

bool World::dead(int64_t rank) const {
  for (const Fault& f : cluster.faults)
    if (f.kind == FaultKind::dead_rank && f.rank == rank && clock.now() >= seconds_to_nanos(f.at_s))
      return true;
  return false;
}

std::optional<std::string> World::broken(int64_t a, int64_t b) const {
  for (const Fault& f : cluster.faults) {
    if (clock.now() < seconds_to_nanos(f.at_s)) continue;
    if (f.kind == FaultKind::dead_rank && (f.rank == a || f.rank == b))
      return fmt::format("rank {} is lost (dead_rank fault at {} ms, {})", f.rank, f.at_s * 1e3, f.origin);
    if (f.kind == FaultKind::lost_link && ((f.rank == a && f.peer == b) || (f.rank == b && f.peer == a)))
      return fmt::format("the link between rank {} and rank {} is lost (lost_link fault at {} ms, {})",
                         f.rank, f.peer, f.at_s * 1e3, f.origin);
  }
  return std::nullopt;
}

void World::fail_after_timeout(std::string why) {
  clock.after(seconds_to_nanos(cluster.peer_timeout_s), [this, why = std::move(why)] {
    if (!failure)
      failure = fmt::format("at {:.3f} ms: {}; no answer within peer_timeout_s = {} s, so the job stops",
                            nanos_to_ms(clock.now()), why, cluster.peer_timeout_s);
  });
}

void World::record(int64_t rank, Track track, std::string name, Nanos start, Nanos end) {
  if (tracing) timeline.push_back(TimelineEvent{rank, track, std::move(name), start, end});
}

}  // namespace troupe::sim
