// `troupe plan`: the parallel layout, ZeRO stage, offload, schedule, micro-batch and
// accumulation of a job for a cluster (the StrategySelector of the design seeds), chosen
// by simulation. Every candidate that divides the cluster and the model is made into a
// job (the config's own checks refuse what the runtime cannot run), costed, simulated
// with the real schedulers, and dropped when a rank would hold more than its memory; the
// rest are ranked by simulated step time, except that among those within 1% of the
// fastest (closer than the simulation can tell) the simplest comes first: fewer stages,
// tensor-parallel ranks, ZeRO partitioning, offload and accumulation steps.
// Thread safety: plan_job runs simulations one after another on the calling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "runtime/config/choices.hpp"
#include "runtime/config/config.hpp"
#include "sim/cluster.hpp"
#include "sim/cost_model.hpp"

namespace troupe::sim {

struct Candidate {
  int64_t dp = 1, pp = 1, tp = 1;
  int64_t zero = 0;
  OffloadTier offload = OffloadTier::none;  ///< the optimizer's tier
  std::string schedule = "1f1b";
  int64_t micro = 1, accumulation = 1;
  /// "dp 2 × pp 1 × tp 1, ZeRO-1, micro 4 × 2, 1f1b".
  std::string describe() const;
};

struct PlannedJob {
  Candidate candidate;
  JobConfig job;
  double step_ms = 0;
  double tokens_per_s = 0;
  double bubble = 0;
  double exposed_comm_ms = 0;
  int64_t peak_bytes = 0;
  std::string refused;  ///< why it was not ranked ("" when it was)
};

struct Plan {
  std::vector<PlannedJob> ranked;   ///< the chosen first, then fastest first
  std::vector<PlannedJob> refused;  ///< with the reason
  int64_t memory_budget = 0;        ///< per rank
};

/// The layer times of a job (by micro-batch size and tp the candidates differ).
using LayerCostSource = std::function<Result<std::vector<LayerCost>>(const JobConfig& job)>;

/// Every candidate layout for `base`'s model and global batch on `cluster`.
std::vector<Candidate> plan_candidates(const JobConfig& base, const ClusterSpec& cluster);
/// `base` with `c` applied, rendered and loaded again so the config's checks run.
Result<JobConfig> apply_candidate(const JobConfig& base, const Candidate& c);
/// Simulates every candidate; an error only when none could be costed at all.
Result<Plan> plan_job(const JobConfig& base, const ClusterSpec& cluster, const LayerCostSource& layers);
/// Why the best beats the next: the figures that differ, as a sentence.
std::string why_first(const Plan& plan, std::size_t index);

}  // namespace troupe::sim
