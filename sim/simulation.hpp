// `troupe simulate`: the job's scheduler actors (actors/scheduler.hpp, the same code that
// drives a real rank, with the job's schedule or event-driven scheduler) run for every rank
// of a simulated cluster on CAF's deterministic coordinator, against stage, collective,
// comm and loader actors that answer their protocols on a virtual clock (sim_stage.hpp,
// services.hpp) with the cluster's cost models (cost_model.hpp, link_model.hpp). Out
// come the predicted step time, bubble, exposed communication and peak memory per rank,
// and, when asked, the timeline. The same inputs (seed included) give the same timeline.
// Thread safety: simulate_job runs an actor system of its own on the calling thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "runtime/config/config.hpp"
#include "sim/cluster.hpp"
#include "sim/cost_model.hpp"
#include "sim/world.hpp"

namespace troupe::sim {

struct SimulationOptions {
  int64_t steps = 2;
  bool trace = false;  ///< keep the timeline
};

struct StageFigures {
  int64_t stage = 0;
  /// The most any of its ranks held: the ledger's kinds, with flops compute autograd's saved tensors too.
  int64_t peak_bytes = 0;
  /// Of which, by kind (the most of any of its ranks), as `troupe run --metrics` reports them.
  int64_t model_state_bytes = 0;
  int64_t communication_bytes = 0;
  int64_t activation_bytes = 0;
  /// Its ranks' idle fraction, averaged over them and the steps. As on a real rank, a rank
  /// of a pipeline reports the world's (busy time summed over the world), a rank without
  /// one its own.
  double bubble = 0;
  double busy_ms = 0;          ///< compute per step, its busiest rank
  double exposed_comm_ms = 0;  ///< communication waited on per step, its most exposed rank
};

struct SimulationResult {
  std::vector<double> step_ms;  ///< each step: from the previous step's end on every rank to this one's
  double bubble = 0;            ///< the idle fraction the schedulers report, averaged over ranks and steps
  double exposed_comm_ms = 0;   ///< per step, averaged over ranks
  int64_t peak_bytes = 0;       ///< the most any rank held
  int64_t peak_rank = 0;
  double step_flops = 0;  ///< the model's matrix-product FLOPs per step
  double mfu = 0;         ///< step_flops / (step time × ranks × the device's GEMM rate)
  int64_t tokens = 0;     ///< per step
  int64_t ranks = 0;
  int64_t events = 0;  ///< clock events fired
  double wall_s = 0;   ///< how long the simulation took here
  /// ClusterSpec::noise, in short: how many ratios (a pass's forward or backward over its
  /// median) it holds, their mean and 90th percentile.
  int64_t noise_passes = 0;
  double noise_mean = 1;
  double noise_p90 = 1;
  std::vector<StageFigures> stages;
  std::vector<TimelineEvent> timeline;  ///< with SimulationOptions::trace
  std::vector<pipeline::RankPlace> places;
  std::string error;  ///< a failure the job ran into (a fault), or ""
  double step_ms_median() const;
};

/// Simulates `steps` steps of `job` on `cluster` with layer times `layers` (by model layer;
/// flops_layer_costs() for hardware that is not here). An error when the job cannot be
/// costed or placed; a job that fails in simulation (a fault, a stuck schedule) returns a
/// result whose `error` says why, with the steps before it.
Result<SimulationResult> simulate_job(const JobConfig& job, const ClusterSpec& cluster,
                                      const std::vector<LayerCost>& layers, const SimulationOptions& options);

/// The timeline as Chrome-trace JSON (Perfetto, chrome://tracing): one process per rank,
/// a track each for compute, transfers and collectives; microseconds of virtual time.
std::string timeline_json(const SimulationResult& result);
/// One JSON object (one line): step_ms, step_ms_each, bubble, exposed_comm_ms, peak_bytes,
/// peak_rank, mfu, tokens_per_s, ranks, events, wall_s, stages, error.
std::string result_json(const SimulationResult& result, const std::string& job, const std::string& cluster);
/// The report for people: the figures and a line per pipeline stage.
std::string render_result(const SimulationResult& result, const std::string& job, const std::string& cluster);

}  // namespace troupe::sim
