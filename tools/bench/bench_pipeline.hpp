// `troupe bench pipeline`: the pipeline's bubble, measured, beside the formula's, and what
// a hop between stages costs when the stages make it.
//
// Starts pp x dp ranks on this machine, each one stage of a model whose layers cost a set
// time in forward and in backward (they sleep, so the ranks do not compete for cores and
// every stage costs the same however many share the machine; with --spin they keep a core
// busy instead, as compute does, and the stages' actors and transports wait their turn for
// the cores as they do in training), trains a few steps with the given schedule, and prints
// rank 0's mean bubble over the steps after the first two —
// 1 − Σ stage compute time / (pp × step time) — beside (pp − 1)/(m + pp − 1), the idle
// fraction of GPipe and 1F1B when forward and backward cost the same, and the median of the
// hops a stage waited on (sim/trace_hops.hpp: from the neighbour's compute end to its own
// start, read from the run's trace).
//
// With --job FILE it runs that job's own model instead (the built-in GPT of its [model],
// its batch, parallelism and schedule, `--set` overrides as `troupe run` takes them): the
// real layers' compute, memory traffic and activation sizes. Beside the measured bubble it
// prints the schedule's plan at unit costs and at the passes' measured costs (their medians
// in the run's trace, sim/trace_passes.hpp), and the tokens per second.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe {

struct PipelineBenchOptions {
  int64_t pp = 2;
  int64_t dp = 1;      ///< replicas of the pipeline
  bool spin = false;   ///< layers spin rather than sleep
  int64_t bytes = 64;  ///< the activation passed between stages
  int64_t micro_batches = 8;
  std::string schedule = "1f1b";
  int64_t steps = 6;              ///< measured steps, after 2 warm-up steps
  double layer_ms = 10;           ///< forward time of each stage's layer; backward takes the same
  bool json = false;              ///< one JSON object: bubble, bubble_formula, hop_ms, ...
  std::string trace_path;         ///< write the run's trace (a timeline of every stage)
  std::string job_path;           ///< set: run this job's model (pp, dp, schedule, ... from the job)
  std::vector<std::string> sets;  ///< overrides of the job's keys, section.key=value
};

/// Starts the ranks and returns the exit code.
int run_pipeline_bench(const PipelineBenchOptions& options, const std::string& troupe_program);

/// One rank of it (rank and coordinator from the environment).
int run_pipeline_bench_rank(const PipelineBenchOptions& options);

}  // namespace troupe
