// A closed-form step time for `troupe plan` to rank layouts before it simulates any: the
// passes of one pipeline at the cost model's chunk times (their exposed tensor-parallel
// and ZeRO-3 communication included) laid out by the schedule's own programs
// (pipeline/simulate.hpp, the executor that checks them), then what follows the last
// backward: the gradient reduction that overlap cannot hide, the optimizer update (or its
// NVMe swap) and ZeRO 1-2's parameter gather, over the link model.
//
// It leaves out what only the simulation sees (host cores shared by computes and progress
// threads, collectives of many groups on one link, noise), so it ranks rather than
// predicts: the planner simulates the layouts it puts first.
// Thread safety: pure function.
#pragma once

#include <vector>

#include "base/result.hpp"
#include "runtime/config/config.hpp"
#include "sim/cluster.hpp"
#include "sim/cost_model.hpp"

namespace troupe::sim {

struct StepEstimate {
  double step_ms = 0;    ///< passes + tail
  double passes_ms = 0;  ///< the pipeline's forwards and backwards, its bubble included
  double tail_ms = 0;    ///< after the last backward: exposed reduction, update, gather
  double bubble = 0;     ///< the schedule's idle fraction at these costs
};

/// The estimate for `job` (layout, schedule, ZeRO stage, micro-batch) on `cluster` with
/// its costs (job_costs); an error when its schedule cannot be laid out.
Result<StepEstimate> estimate_step(const JobConfig& job, const ClusterSpec& cluster, const JobCosts& costs);

}  // namespace troupe::sim
