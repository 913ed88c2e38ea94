// Every pipeline stage's program for one step, from the job alone: no model, no LibTorch,
// so the engine, `troupe simulate` and `troupe plan` derive the same programs.
// Thread safety: pure functions.
#pragma once

#include <vector>

#include "base/result.hpp"
#include "pipeline/action.hpp"
#include "pipeline/layout.hpp"
#include "runtime/config/config.hpp"

namespace troupe {

/// Every stage's program for one step: the schedule table's ([pipeline] schedule_file) or
/// the named schedule's, checked by the simulated executor (the 1f1b program of one stage
/// when pp = 1). An error names the key and what the executor found.
Result<std::vector<pipeline::Program>> stage_programs(const JobConfig& job);

/// Where the job's model chunks sit on its pipeline ranks: the schedule's layout (a V for
/// zbv), round-robin for a schedule table, one chunk per rank without virtual stages.
pipeline::Layout pipeline_layout(const JobConfig& job);

}  // namespace troupe
