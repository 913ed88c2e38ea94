// `troupe plan FILE --cluster CLUSTER.toml [--out PATH] [--top N] [--json]`: the best
// layouts of FILE's model and global batch on the cluster, by simulated step time
// (sim/planner.hpp), with why; the best written as a job file.
// Thread safety: run from one thread.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/config/config.hpp"
#include "tools/simulate_command.hpp"

namespace troupe {

struct PlanArguments {
  SimulateArguments simulate;  ///< the cluster, and how layers are timed
  std::string out;             ///< where the chosen job goes; empty: FILE's name with .plan.toml
  int64_t top = 5;
};

int run_plan(const JobConfig& job, const PlanArguments& args);

}  // namespace troupe
