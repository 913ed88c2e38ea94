// `troupe plan FILE --cluster CLUSTER.toml [--out PATH] [--top N] [--json] [--simulate-top K]
// [--margin F] [--budget-seconds S] [--exhaustive] [--threads N]`: the best layouts of FILE's model and
// global batch on the cluster, pruned by memory and a closed-form estimate, the contenders
// simulated (sim/planner.hpp), with why; the best written as a job file. On a terminal a
// progress line says where it is; with --json or into a pipe, only the answer.
// Thread safety: run from one thread.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/config/config.hpp"
#include "sim/planner.hpp"
#include "tools/simulate_command.hpp"

namespace troupe {

struct PlanArguments {
  SimulateArguments simulate;  ///< the cluster, and how layers are timed
  std::string out;             ///< where the chosen job goes; empty: FILE's name with .plan.toml
  int64_t top = 5;
  sim::PlanOptions plan;  ///< pruning, contenders, budget and threads (its progress set by run_plan)
};

int run_plan(const JobConfig& job, const PlanArguments& args);

}  // namespace troupe
