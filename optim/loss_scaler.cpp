#include "optim/loss_scaler.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace troupe {

LossScaler::LossScaler(const LossScaleOptions& options)
    : options_(options),
      scale_(options.loss_scale > 0 ? options.loss_scale
                                    : std::ldexp(1.0, static_cast<int>(options.initial_scale_power))),
      hysteresis_(options.hysteresis) {}

Result<LossScaler> LossScaler::make(const LossScaleOptions& o) {
  if (!std::isfinite(o.loss_scale) || o.loss_scale < 0)
    return make_error(
        fmt::format("loss_scale = {} is not a loss scale: 0 for a dynamic scale, or a finite static "
                    "scale above 0",
                    o.loss_scale));
  if (o.loss_scale == 0) {
    if (o.loss_scale_window <= 0)
      return make_error(
          fmt::format("loss_scale_window = {}: the steps between scale increases must be at least 1",
                      o.loss_scale_window));
    if (!std::isfinite(o.min_loss_scale) || o.min_loss_scale <= 0)
      return make_error(
          fmt::format("min_loss_scale = {}: the smallest scale must be above 0", o.min_loss_scale));
    if (o.hysteresis < 1)
      return make_error(
          fmt::format("hysteresis = {}: the overflows absorbed before the scale halves must be at "
                      "least 1",
                      o.hysteresis));
    if (o.initial_scale_power < 0 || o.initial_scale_power > 126)
      return make_error(
          fmt::format("initial_scale_power = {}: the first scale is 2^power, with power 0 to 126",
                      o.initial_scale_power));
  }
  return LossScaler(o);
}

Status LossScaler::update(bool overflow) {
  if (!dynamic()) {
    ++iteration_;
    return {};
  }
  if (overflow) {
    if (hysteresis_ > 1) {
      --hysteresis_;
    } else {
      if (scale_ == options_.min_loss_scale && options_.error_at_min_scale)
        return make_error(
            fmt::format("Current loss scale already at minimum - cannot decrease scale anymore "
                        "(loss scale {}, min_loss_scale {}, iteration {}): the gradients overflow "
                        "whatever the scale; stopping",
                        scale_, options_.min_loss_scale, iteration_));
      scale_ = std::max(scale_ / 2, options_.min_loss_scale);
    }
    last_overflow_ = iteration_;
  } else {
    if (options_.consecutive_hysteresis) hysteresis_ = options_.hysteresis;
    const int64_t stable = iteration_ - last_overflow_ - 1;
    if (stable > 0 && stable % options_.loss_scale_window == 0) {
      hysteresis_ = options_.hysteresis;
      scale_ *= 2;
    }
  }
  ++iteration_;
  return {};
}

}  // namespace troupe
