// `troupe plan`: the parallel layout, ZeRO stage, offload, schedule, micro-batch and
// accumulation of a job for a cluster (the StrategySelector of the design seeds), chosen
// by simulation. Every candidate that divides the cluster and the model is made into a
// job (the config's own checks refuse what the runtime cannot run) and costed. Then:
//   - pruned by memory: a rank's model state and buffers alone (the cost model's, which is
//     `troupe estimate`'s) over its memory, which the simulation would refuse as well; a
//     GPU's memory holds neither here nor there the optimizer state offloaded to its host;
//   - ranked by a closed-form step time (step_estimate.hpp), and only the contenders
//     simulated: the estimates within a margin of the best, at most simulate_top of them;
//   - simulated side by side, each simulation on a thread of its own, the results placed
//     by contender so that the answer does not depend on which finished first;
//   - dropped when a simulated rank holds more than its memory; the rest ranked by
//     simulated step time, except that among those within 1% of the fastest (closer than
//     the simulation can tell) the simplest comes first: fewer stages, tensor-parallel
//     ranks, ZeRO partitioning, offload and accumulation steps.
// With a time budget, no simulation starts that would not end within it (by the ones
// before it; the best estimate's always runs), and the plan says how many it left.
// Thread safety: plan_job runs on one thread and starts its own for the simulations;
// the progress callback is called on the calling thread.
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
  double estimate_ms = 0;  ///< the closed-form step time (0: not estimated)
  double step_ms = 0;      ///< simulated (0: not simulated)
  double tokens_per_s = 0;
  double bubble = 0;
  double exposed_comm_ms = 0;
  int64_t peak_bytes = 0;       ///< in a rank's memory (a GPU's: without its offloaded optimizer state)
  std::vector<int64_t> offloaded_bytes;  ///< by stage: a GPU rank's optimizer state in host memory
  std::string refused;  ///< why it was not ranked ("" when it was)
};

struct Plan {
  std::vector<PlannedJob> ranked;   ///< the chosen first, then fastest first
  std::vector<PlannedJob> refused;  ///< by the config, the cost model or the simulation, with the reason
  std::vector<PlannedJob> pruned;   ///< not simulated, with the reason (memory, estimate, budget)
  int64_t memory_budget = 0;        ///< per rank
  int64_t considered = 0;           ///< candidate layouts
  int64_t pruned_memory = 0;        ///< of them, over memory by model state alone
  int64_t pruned_estimate = 0;      ///< of them, estimated too far behind the best
  int64_t unsimulated_budget = 0;   ///< contenders the time budget left unsimulated
  int64_t simulated = 0;
  int64_t smallest_need = 0;  ///< the least memory per rank any layout needs (for "no layout fits")
};

/// Where a plan is, for a progress line.
struct PlanProgress {
  int64_t considered = 0, pruned = 0, contenders = 0, simulated = 0;
  double best_step_ms = 0;  ///< the fastest simulated so far that fits (0: none yet)
  std::string best;         ///< its layout
  double elapsed_s = 0;
};

struct PlanOptions {
  /// Contenders: the estimates within `margin` of the best estimate, at most simulate_top.
  double margin = 0.10;
  int64_t simulate_top = 16;
  bool exhaustive = false;  ///< simulate every layout that fits memory (slow; for checking)
  double budget_s = 0;      ///< 0: none
  int64_t threads = 0;      ///< simulations at once; 0: the machine's cores
  std::function<void(const PlanProgress&)> progress;  ///< called as the plan moves, if set
};

/// The layer times of a job (by micro-batch size and tp the candidates differ).
using LayerCostSource = std::function<Result<std::vector<LayerCost>>(const JobConfig& job)>;

/// Every candidate layout for `base`'s model and global batch on `cluster`.
std::vector<Candidate> plan_candidates(const JobConfig& base, const ClusterSpec& cluster);
/// `base` with `c` applied, rendered and loaded again so the config's checks run.
Result<JobConfig> apply_candidate(const JobConfig& base, const Candidate& c);
/// Prunes, estimates and simulates the contenders; an error only when no candidate could
/// be costed at all.
Result<Plan> plan_job(const JobConfig& base, const ClusterSpec& cluster, const LayerCostSource& layers,
                      const PlanOptions& options = {});
/// Why the best beats the next: the figures that differ, as a sentence.
std::string why_first(const Plan& plan, std::size_t index);

}  // namespace troupe::sim
