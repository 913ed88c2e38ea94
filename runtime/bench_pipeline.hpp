// `troupe bench pipeline`: the pipeline's bubble, measured, beside the formula's.
//
// Starts pp ranks on this machine, each one stage of a model whose layers cost a set time
// in forward and in backward (they sleep, so the ranks do not compete for cores and every
// stage costs the same however many share the machine), trains a few steps with the given
// schedule, and prints rank 0's mean bubble over the steps after the first two —
// 1 − Σ stage compute time / (pp × step time) — beside (pp − 1)/(m + pp − 1), the idle
// fraction of GPipe and 1F1B when forward and backward cost the same.
#pragma once

#include <cstdint>
#include <string>

namespace troupe {

struct PipelineBenchOptions {
  int64_t pp = 2;
  int64_t micro_batches = 8;
  std::string schedule = "1f1b";
  int64_t steps = 6;       ///< measured steps, after 2 warm-up steps
  double layer_ms = 10;    ///< forward time of each stage's layer; backward takes the same
  bool json = false;       ///< one JSON object: bubble, bubble_formula, ...
  std::string trace_path;  ///< write the run's trace (a timeline of every stage)
};

/// Starts the ranks and returns the exit code.
int run_pipeline_bench(const PipelineBenchOptions& options, const std::string& troupe_program);

/// One rank of it (rank and coordinator from the environment).
int run_pipeline_bench_rank(const PipelineBenchOptions& options);

}  // namespace troupe
