#pragma once
// What a real pipeline's passes cost, read from its merged trace, and the bubble its
// schedule plans at those costs: the yardstick for its measured bubble on real layers
// (`troupe bench pipeline --job`), where a forward, an input half and a weight half of a
// backward do not cost one slot each as the schedules' formulas assume.
#include <cstdint>

#include <nlohmann/json_fwd.hpp>

#include "base/result.hpp"
#include "pipeline/schedule.hpp"

namespace troupe::sim {

/// Median times of a stage's passes over the steps from `first_step` (counted from 0), in
/// ms, from the compute spans "forward S.M.C", "backward S.M.C", "backward_input S.M.C"
/// and "backward_weight S.M.C" of every rank; 0 where a kind never ran.
struct PassCosts {
  double forward_ms = 0;
  double backward_ms = 0;  ///< a whole backward
  double input_ms = 0;     ///< a backward's input half
  double weight_ms = 0;    ///< its weight half
  int64_t passes = 0;      ///< spans counted
};
PassCosts pass_costs(const nlohmann::json& trace, int64_t first_step);

/// The bubble (1 − busy / (ranks × time)) the simulated executor gives `schedule`'s
/// programs for `shape` when each pass takes what `costs` says (to 0.1 ms; a whole
/// backward's time split between the halves by their measured ratio, or in two, when
/// the halves never ran) and messages take no time.
Result<double> planned_bubble(const std::string& schedule, const pipeline::ScheduleShape& shape,
                              const PassCosts& costs);

}  // namespace troupe::sim
