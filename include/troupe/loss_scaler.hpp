// fp16 loss scaling for a trainer with its own loop, as troupe's engine does it (and
// DeepSpeed before it):
//
//   auto scaler = troupe::LossScaler::make(troupe::LossScaleOptions{});  // dynamic, 2^16
//   for (...) {
//     (loss * scaler->scale()).backward();
//     double square_sum = ...;                         // of every gradient, over every rank
//     bool overflow = !std::isfinite(square_sum);      // the same answer on every rank
//     if (!overflow) { unscale by 1 / scaler->scale(), clip, step the optimizer; }
//     if (auto ok = scaler->update(overflow); !ok) stop(ok.error().message);
//   }
//
// The options are DeepSpeed's fp16 keys (loss_scale, initial_scale_power,
// loss_scale_window, hysteresis, consecutive_hysteresis, min_loss_scale) with its
// defaults; error_at_min_scale chooses between its ZeRO scaler, which stops when an
// overflow finds the scale at its minimum, and its stage-0 one, which stays there.
// Thread safety: a plain value.
#pragma once

#include "optim/loss_scaler.hpp"
