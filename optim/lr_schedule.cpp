#include "optim/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace troupe {
namespace {

constexpr double kPi = 3.14159265358979323846;

}  // namespace

const char* lr_schedule_name(LrScheduleType type) {
  switch (type) {
    case LrScheduleType::constant:
      return "";
    case LrScheduleType::warmup_lr:
      return "WarmupLR";
    case LrScheduleType::warmup_decay_lr:
      return "WarmupDecayLR";
    case LrScheduleType::warmup_cosine_lr:
      return "WarmupCosineLR";
    case LrScheduleType::one_cycle:
      return "OneCycle";
  }
  return "?";
}

const char* warmup_type_name(WarmupType type) {
  return type == WarmupType::linear ? "linear" : "log";
}

LrSchedule::LrSchedule(const LrScheduleOptions& options, double optimizer_lr, bool has_betas)
    : o_(options),
      optimizer_lr_(optimizer_lr),
      has_betas_(has_betas),
      warmup_(std::max<int64_t>(2, options.warmup_num_steps)) {}

Result<LrSchedule> LrSchedule::make(const LrScheduleOptions& o, double optimizer_lr, bool has_betas,
                                    std::vector<std::string>* warnings) {
  auto warn = [&](std::string w) {
    if (warnings) warnings->push_back(std::move(w));
  };
  if (warms_up(o.type)) {
    if (o.warmup_num_steps <= 0)
      return make_error(
          fmt::format("[scheduler] warmup_num_steps = {}: the warm-up must be a positive number of "
                      "steps",
                      o.warmup_num_steps));
  }
  if (o.type == LrScheduleType::warmup_decay_lr || o.type == LrScheduleType::warmup_cosine_lr) {
    if (o.total_num_steps < 0)
      return make_error(fmt::format("[scheduler] {} needs total_num_steps, the step its decay ends at",
                                    lr_schedule_name(o.type)));
    if (o.total_num_steps < std::max<int64_t>(2, o.warmup_num_steps))
      warn(fmt::format(
          "[scheduler] total_num_steps = {} is less than warmup_num_steps = {}: the rate drops to its "
          "floor as the warm-up ends",
          o.total_num_steps, o.warmup_num_steps));
  }
  if (o.type == LrScheduleType::one_cycle) {
    if (!o.cycle_min_lr || !o.cycle_max_lr)
      return make_error("[scheduler] OneCycle needs cycle_min_lr and cycle_max_lr");
    if (o.cycle_first_step_size <= 0)
      return make_error(fmt::format("[scheduler] cycle_first_step_size = {}: it must be positive",
                                    o.cycle_first_step_size));
    if (o.cycle_second_step_size && *o.cycle_second_step_size < 0)
      return make_error(fmt::format("[scheduler] cycle_second_step_size = {}: it must be 0 or more",
                                    *o.cycle_second_step_size));
    if (o.cycle_momentum && !has_betas)
      warn("[scheduler] cycle_momentum is off: the optimizer has no betas to cycle (SGD)");
  }
  return LrSchedule(o, optimizer_lr, has_betas);
}

// g of the warm-up at iteration 0 <= it < W: logarithmic or linear.
double LrSchedule::warmup_fraction(int64_t it) const {
  if (o_.warmup_type == WarmupType::linear) return static_cast<double>(it) / static_cast<double>(warmup_);
  return std::log(static_cast<double>(it + 1)) / std::log(static_cast<double>(warmup_));
}

UpdateHyper LrSchedule::at(int64_t it) const {
  if (o_.type == LrScheduleType::constant) return UpdateHyper{optimizer_lr_, std::nullopt, std::nullopt};
  if (o_.type == LrScheduleType::one_cycle) return one_cycle(it);
  if (o_.type == LrScheduleType::warmup_cosine_lr) {
    if (it < 0) return UpdateHyper{0.0, std::nullopt, std::nullopt};
    double ratio;
    if (it < warmup_) {
      ratio = o_.warmup_min_ratio + warmup_fraction(it) * (1 - o_.warmup_min_ratio);
    } else {
      const double span = static_cast<double>(std::max<int64_t>(1, o_.total_num_steps - warmup_));
      const double p = std::min(1.0, static_cast<double>(it - warmup_ + 1) / span);
      ratio = std::max(0.0, o_.cos_min_ratio + (1 - o_.cos_min_ratio) * (1 + std::cos(kPi * p)) / 2);
    }
    return UpdateHyper{optimizer_lr_ * ratio, std::nullopt, std::nullopt};
  }
  const double low = o_.warmup_min_lr;
  const double high = o_.warmup_max_lr                             ? *o_.warmup_max_lr
                      : o_.type == LrScheduleType::warmup_decay_lr ? 0.001
                                                                   : optimizer_lr_;
  double g = 1;
  if (it < 0)
    g = 0;
  else if (it < warmup_)
    g = warmup_fraction(it);
  else if (o_.type == LrScheduleType::warmup_decay_lr)
    g = std::max(0.0, static_cast<double>(o_.total_num_steps - it) /
                          static_cast<double>(std::max<int64_t>(1, o_.total_num_steps - warmup_)));
  return UpdateHyper{low + (high - low) * g, std::nullopt, std::nullopt};
}

UpdateHyper LrSchedule::one_cycle(int64_t it) const {
  const double min_lr = *o_.cycle_min_lr, max_lr = *o_.cycle_max_lr;
  const bool momentum = o_.cycle_momentum && has_betas_;
  auto with_beta = [&](double lr, double beta1) {
    return momentum ? UpdateHyper{lr, beta1, 0.99} : UpdateHyper{lr, std::nullopt, std::nullopt};
  };
  if (it < 0) return with_beta(min_lr, o_.cycle_min_mom);  // as constructed: both at their minimum
  const int64_t first = o_.cycle_first_step_size;
  const int64_t second = o_.cycle_second_step_size.value_or(first);
  const int64_t total = first + second;
  if (it >= total) {
    const double d = static_cast<double>(it - total + 1);
    const bool decays = o_.decay_step_size != 0;
    const double step_size = static_cast<double>(o_.decay_step_size);
    const double lr =
        decays && o_.decay_lr_rate != 0 ? min_lr / (1 + o_.decay_lr_rate * d / step_size) : min_lr;
    const double beta1 = decays && o_.decay_mom_rate != 0
                             ? o_.cycle_max_mom * (1 + o_.decay_mom_rate * d / step_size)
                             : o_.cycle_max_mom;
    return with_beta(lr, beta1);
  }
  const int64_t b = it + 1;
  const double x = static_cast<double>(b % total) / static_cast<double>(total);
  const double rising_share = static_cast<double>(first) / static_cast<double>(total);
  const bool rising = x <= rising_share;
  double f = rising ? x / rising_share : (1 - x) / (1 - rising_share);
  const int64_t stairs =
      rising ? o_.cycle_first_stair_count : o_.cycle_second_stair_count.value_or(o_.cycle_first_stair_count);
  if (stairs > 0) {
    const int64_t c = b % total;
    const double position = c <= first
                                ? static_cast<double>(c * stairs) / static_cast<double>(first)
                                : static_cast<double>((total - c) * stairs) / static_cast<double>(second);
    f = std::floor(position) / static_cast<double>(stairs);
  }
  return with_beta(min_lr + (max_lr - min_lr) * f,
                   o_.cycle_max_mom - (o_.cycle_max_mom - o_.cycle_min_mom) * f);
}

}  // namespace troupe
