// The loss scale of fp16 training, as DeepSpeed keeps it. The loss is multiplied by
// scale() before backward, so small gradients survive fp16; the gradients are divided by
// it again before the update. A step whose gradients hold an inf or a NaN (the global
// gradient norm is not finite, which every rank sees alike) is skipped, and update()
// decides the next scale:
//
//   static (loss_scale > 0): the scale never changes; overflowing steps are still skipped.
//   dynamic, with ZeRO stages 1-3 (DeepSpeed's DynamicLossScaler): an overflow spends one
//     unit of hysteresis while more than one is left, and otherwise halves the scale (not
//     below min_loss_scale; an overflow already at the minimum is an error, DeepSpeed's
//     "Current loss scale already at minimum"); after loss_scale_window steps without
//     overflow since the last one the scale doubles and the hysteresis is refilled;
//     consecutive_hysteresis refills it after every clean step.
//   dynamic, at ZeRO stage 0 (DeepSpeed's FP16_Optimizer): the same, except that an
//     overflow at the minimum scale keeps it there instead of stopping.
//
// The counters follow DeepSpeed's code (the window counts from iteration -1, so the first
// increase comes at iteration loss_scale_window), so for any sequence of overflows the
// scales and the skipped steps are DeepSpeed's.
// Thread safety: a plain value.
#pragma once

#include <cstdint>

#include "base/result.hpp"

namespace troupe {

struct LossScaleOptions {
  double loss_scale = 0;             ///< > 0: a static scale; 0: dynamic
  int64_t initial_scale_power = 16;  ///< dynamic: the first scale is 2^this
  int64_t loss_scale_window = 1000;  ///< clean steps since the last overflow before the scale doubles
  int64_t hysteresis = 2;            ///< overflows absorbed before the scale halves
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1;
  bool error_at_min_scale = true;  ///< ZeRO stages 1-3; stage 0 (FP16_Optimizer) keeps the minimum
};

/// Everything a LossScaler changes as it runs: what a checkpoint saves.
struct LossScalerState {
  double scale = 1;
  int64_t iteration = 0;
  int64_t last_overflow = -1;
  int64_t hysteresis = 1;
};

class LossScaler {
 public:
  /// An error names the key and what it may be (DeepSpeed's checks: a finite loss_scale of
  /// 0 or more; when dynamic, a positive window, minimum and hysteresis).
  static Result<LossScaler> make(const LossScaleOptions& options);

  double scale() const { return scale_; }
  bool dynamic() const { return options_.loss_scale == 0; }
  /// Steps seen so far (DeepSpeed's cur_iter).
  int64_t iteration() const { return iteration_; }
  int64_t hysteresis_left() const { return hysteresis_; }

  /// The step ended, with an overflow (it was skipped) or without; the scale for the next
  /// step follows. An error when an overflow finds the scale at its minimum and the
  /// options say to stop there.
  Status update(bool overflow);

  LossScalerState state() const { return {scale_, iteration_, last_overflow_, hysteresis_}; }
  /// Continues from a saved state (the options stay this scaler's own).
  void restore(const LossScalerState& s) {
    scale_ = s.scale;
    iteration_ = s.iteration;
    last_overflow_ = s.last_overflow;
    hysteresis_ = s.hysteresis;
  }

 private:
  explicit LossScaler(const LossScaleOptions& options);

  LossScaleOptions options_;
  double scale_ = 1;
  int64_t iteration_ = 0;
  int64_t last_overflow_ = -1;
  int64_t hysteresis_ = 1;
};

}  // namespace troupe
