// [scheduler] as the learning-rate schedule it names (optim/lr_schedule.hpp): DeepSpeed's
// None (a rate or size left at -1) made unset, checked against the optimizer it drives.
// Thread safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "base/result.hpp"
#include "optim/lr_schedule.hpp"
#include "runtime/config/config.hpp"

namespace troupe {

LrScheduleOptions lr_schedule_options(const SchedulerConfig& scheduler);

/// The job's schedule over its [optimizer]. `warnings` gets what DeepSpeed only warns
/// about, and a warm-up longer than [train] steps.
Result<LrSchedule> make_lr_schedule(const JobConfig& job, std::vector<std::string>* warnings = nullptr);

}  // namespace troupe
