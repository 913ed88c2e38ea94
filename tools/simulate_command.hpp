// `troupe simulate FILE --cluster CLUSTER.toml [--trace out.json] [--json] [--steps N]`:
// the job's layer times (from FLOPs and the cluster's device, or measured here with
// compute = "measured"), then the simulation (sim/simulation.hpp), its report or JSON, and
// the timeline when asked.
// Thread safety: run from one thread; measuring uses torch's global thread count.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "runtime/config/config.hpp"
#include "sim/cluster.hpp"
#include "sim/cost_model.hpp"

namespace troupe {

struct SimulateArguments {
  std::string file;  ///< the job's file and --set overrides, for the measuring children
  std::vector<std::string> overrides;
  std::string program;  ///< this program
  std::string cluster;
  std::string trace;
  bool json = false;
  int64_t steps = 2;
  int repeats = 3;      ///< measured compute: timed passes per layer
  double warmup_s = 0;  ///< measured compute: untimed passes for this long first
};

/// The layer times `cluster` asks for: from FLOPs, or (compute = "measured") the job's
/// layers timed by as many `troupe profile --median` processes at once as the host runs
/// ranks, each with a rank's threads, so that they contend for the cores, caches and memory
/// bandwidth as the ranks will; their times averaged. `args`: the job's file and overrides.
/// `noise`, when given and measured: by process, its timed passes over its median pass
/// (ClusterSpec::noise).
Result<std::vector<sim::LayerCost>> layer_costs(const JobConfig& job, const sim::ClusterSpec& cluster,
                                                const SimulateArguments& args,
                                                std::vector<std::vector<double>>* noise = nullptr);

/// Runs the command; returns the exit code (2 for a bad job or cluster, 1 when the
/// simulated job fails).
int run_simulate(const JobConfig& job, const SimulateArguments& args);

}  // namespace troupe
