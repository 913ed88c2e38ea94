// [scheduler] as the learning-rate schedule it names (optim/lr_schedule.hpp): DeepSpeed's
// None (a rate or size left at -1) made unset, checked against the optimizer it drives;
// and [precision]'s loss-scaler keys as the scaler's options (optim/loss_scaler.hpp).
// Thread safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "base/result.hpp"
#include "optim/loss_scaler.hpp"
#include "optim/lr_schedule.hpp"
#include "runtime/config/config.hpp"

namespace troupe {

LrScheduleOptions lr_schedule_options(const SchedulerConfig& scheduler);

/// The job's schedule over its [optimizer]. `warnings` gets what DeepSpeed only warns
/// about, and a warm-up longer than [train] steps.
Result<LrSchedule> make_lr_schedule(const JobConfig& job, std::vector<std::string>* warnings = nullptr);

/// [precision]'s scaler keys; the minimum-scale error is DeepSpeed's ZeRO optimizer's
/// (stages 1-3), stage 0 keeps the minimum as its FP16_Optimizer does.
LossScaleOptions loss_scale_options(const JobConfig& job);

}  // namespace troupe
