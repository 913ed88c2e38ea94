// Pipeline schedules as data: a schedule is a pure function of (stages, micro-batches,
// stage) returning that stage's program (action.hpp). Built in:
//   gpipe: every forward, then every backward (m micro-batches of activations held);
//   1f1b:  p − s − 1 warm-up forwards on stage s, then one forward and one backward in
//          turn, then the remaining backwards (PipeDream-Flush; at most p held on stage 0).
// Both hold (p − 1)/(m + p − 1) of the step idle when forward and backward cost the same.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "pipeline/action.hpp"

namespace troupe::pipeline {

struct ScheduleShape {
  int64_t stages = 1;         ///< p
  int64_t micro_batches = 1;  ///< m: the step's gradient-accumulation micro-batches
};

/// The names make_program() knows, in the order docs list them.
const std::vector<std::string>& schedule_names();

/// Whether `schedule` can run `shape`: an error says why not (an unknown name, with the
/// known ones; 1f1b with fewer micro-batches than stages).
Status check_shape(std::string_view schedule, const ScheduleShape& shape);

/// Stage `stage`'s program for one step of `schedule`.
Result<Program> make_program(std::string_view schedule, const ScheduleShape& shape, int64_t stage);

/// Every stage's program, stage 0 first.
Result<std::vector<Program>> make_programs(std::string_view schedule, const ScheduleShape& shape);

}  // namespace troupe::pipeline
