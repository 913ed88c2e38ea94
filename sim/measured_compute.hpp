#pragma once
// compute = "measured": the layer costs and the pass-to-pass noise of one rank, from what
// `troupe profile --json` printed in each of the processes that timed the layers side by side
// on this host (as many as the simulated host has ranks).
#include <cstdint>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/result.hpp"
#include "sim/cost_model.hpp"

namespace troupe::sim {

/// How many times over the processes ask for the host's cores (1 where they fit).
double oversubscription(int64_t processes, int64_t threads_each, int64_t cores);

/// One rank's full-speed cost of each layer: the processes' layer times averaged, each divided
/// by the oversubscription. Time-slicing's share is the simulated host's to give out again
/// (sim/processors.hpp); what it costs beyond the share (switches, caches refilled) stays in.
Result<std::vector<LayerCost>> full_speed_layer_costs(const std::vector<nlohmann::json>& profiles,
                                                      double oversubscribed);

/// By process, its passes in the order it ran them (each forward, then its backward) over the
/// mean of the processes' medians of that kind: the ratios the simulated ranks replay. Over
/// the common median rather than each process's own, so that a process the host's scheduler
/// slowed throughout leaves its rank behind the others, as it leaves a real rank behind at
/// every reduction. Empty where any process timed no passes.
std::vector<std::vector<double>> pass_noise(const std::vector<nlohmann::json>& profiles);

}  // namespace troupe::sim
