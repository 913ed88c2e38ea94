#include "runtime/config/scheduler.hpp"

#include <fmt/format.h>

namespace troupe {

LrScheduleOptions lr_schedule_options(const SchedulerConfig& s) {
  LrScheduleOptions o;
  o.type = s.type;
  o.warmup_min_lr = s.warmup_min_lr;
  if (s.warmup_max_lr >= 0) o.warmup_max_lr = s.warmup_max_lr;
  o.warmup_num_steps = s.warmup_num_steps;
  o.warmup_type = s.warmup_type;
  o.total_num_steps = s.total_num_steps;
  o.warmup_min_ratio = s.warmup_min_ratio;
  o.cos_min_ratio = s.cos_min_ratio;
  if (s.cycle_min_lr >= 0) o.cycle_min_lr = s.cycle_min_lr;
  if (s.cycle_max_lr >= 0) o.cycle_max_lr = s.cycle_max_lr;
  o.decay_lr_rate = s.decay_lr_rate;
  o.cycle_first_step_size = s.cycle_first_step_size;
  if (s.cycle_second_step_size >= 0) o.cycle_second_step_size = s.cycle_second_step_size;
  o.cycle_first_stair_count = s.cycle_first_stair_count;
  if (s.cycle_second_stair_count != -1) o.cycle_second_stair_count = s.cycle_second_stair_count;
  o.decay_step_size = s.decay_step_size;
  o.cycle_momentum = s.cycle_momentum;
  o.cycle_min_mom = s.cycle_min_mom;
  o.cycle_max_mom = s.cycle_max_mom;
  o.decay_mom_rate = s.decay_mom_rate;
  return o;
}

Result<LrSchedule> make_lr_schedule(const JobConfig& job, std::vector<std::string>* warnings) {
  const bool betas = job.optimizer.type != OptimizerType::sgd;
  auto schedule = LrSchedule::make(lr_schedule_options(job.scheduler), job.optimizer.lr, betas, warnings);
  if (!schedule) return schedule.error();
  const SchedulerConfig& s = job.scheduler;
  if (warnings && warms_up(s.type) && s.warmup_num_steps > job.train.steps)
    warnings->push_back(
        fmt::format("[scheduler] warmup_num_steps = {} is longer than the run ([train] steps = {}): "
                    "the rate never finishes its warm-up",
                    s.warmup_num_steps, job.train.steps));
  return schedule;
}

LossScaleOptions loss_scale_options(const JobConfig& job) {
  const PrecisionConfig& p = job.precision;
  LossScaleOptions o;
  o.loss_scale = p.loss_scale;
  o.initial_scale_power = p.initial_scale_power;
  o.loss_scale_window = p.loss_scale_window;
  o.hysteresis = p.hysteresis;
  o.consecutive_hysteresis = p.consecutive_hysteresis;
  o.min_loss_scale = p.min_loss_scale;
  o.error_at_min_scale = job.zero.policy().stops_at_minimum_loss_scale();
  return o;
}

}  // namespace troupe
