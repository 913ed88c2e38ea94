// What the simulated ranks share: the virtual clock, the cluster's cost models, each
// host's processors and each rank's compute stream, memory ledger and figures, the
// timeline, and the injected faults. The simulator's actors hold their own state and reach
// this only for what a real rank would get from its hardware (a stream, a link, a clock);
// everything runs on the one thread of CAF's deterministic coordinator, so no lock is
// needed and the same inputs give the same timeline.
// Thread safety: none; the simulator's one thread only.
#pragma once

#include <caf/actor.hpp>

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "memory/memory_ledger.hpp"
#include "pipeline/action.hpp"
#include "pipeline/topology.hpp"
#include "runtime/config/config.hpp"
#include "sim/cluster.hpp"
#include "sim/cost_model.hpp"
#include "sim/link_model.hpp"
#include "sim/processors.hpp"
#include "sim/virtual_clock.hpp"

namespace troupe::sim {

enum class Track : int { compute = 0, transfer = 1, collective = 2 };

/// One span of the timeline: a compute on a rank's stream, a transfer it sent, a collective it took part in.
struct TimelineEvent {
  int64_t rank = 0;
  Track track = Track::compute;
  std::string name;
  Nanos start = 0;
  Nanos end = 0;
};

/// A rank's figures, summed over the simulated steps.
struct RankFigures {
  Nanos busy = 0;     ///< computing (at full speed; sharing a CPU host's cores stretches it)
  Nanos exposed = 0;  ///< communication the rank waited on with nothing to compute
};

/// One compute stream: the rank's computes, one at a time in the order they were enqueued,
/// each on its host's shared processors.
class RankStream {
 public:
  using Done = std::function<void(Nanos start)>;  ///< given when the compute began
  RankStream(VirtualClock& clock, SharedProcessors& host) : clock_(&clock), host_(&host) {}
  /// `name` labels the timeline; `done` fires when the compute ends, `started` (if any) when
  /// it begins.
  void enqueue(Nanos cost, std::string name, Done done, std::vector<TimelineEvent>* timeline, int64_t rank,
               std::function<void()> started = {});

 private:
  struct Work {
    Nanos cost = 0;
    std::string name;
    Done done;
    std::vector<TimelineEvent>* timeline = nullptr;
    int64_t rank = 0;
    std::function<void()> started;
  };
  void start_next();
  VirtualClock* clock_;
  SharedProcessors* host_;
  std::deque<Work> waiting_;
  bool busy_ = false;
};

struct World {
  World(JobConfig job, ClusterSpec cluster, JobCosts costs, bool tracing);

  JobConfig job;
  ClusterSpec cluster;
  JobCosts costs;
  LinkModel links;
  pipeline::Grid grid;
  VirtualClock clock;
  bool tracing = false;
  std::vector<std::unique_ptr<SharedProcessors>> hosts;  // by host
  std::vector<std::unique_ptr<RankStream>> streams;      // by rank
  std::vector<std::shared_ptr<MemoryLedger>> ledgers;    // by rank
  std::vector<pipeline::RankPlace> places;               // by rank
  std::vector<std::vector<caf::actor>> chunks;           // by rank, by chunk: the stage actors
  std::vector<RankFigures> figures;                      // by rank
  std::vector<TimelineEvent> timeline;                   // in the order spans ended
  /// By rank and chunk: the action its queue waits at, for a deadlock's message.
  std::vector<std::vector<std::optional<pipeline::Action>>> waiting_at;
  std::optional<std::string> failure;  // the first error; the simulation stops at it

  int64_t ranks() const { return grid.world_size(); }
  /// `base` on `rank`: a slow rank's factor and the seeded jitter (or measured noise) applied.
  Nanos compute_cost(int64_t rank, Nanos base);
  bool dead(int64_t rank) const;
  /// Whether the link from `a` to `b` is lost at this moment (a lost_link fault, or either end dead).
  std::optional<std::string> broken(int64_t a, int64_t b) const;
  /// Stops the job `cluster.peer_timeout_s` from now with `why`, as a lost peer's heartbeat would.
  void fail_after_timeout(std::string why);
  void record(int64_t rank, Track track, std::string name, Nanos start, Nanos end);

 private:
  std::vector<double> slow_;     // by rank
  std::vector<uint64_t> draws_;  // by rank: jitter or noise draws so far
};

}  // namespace troupe::sim
