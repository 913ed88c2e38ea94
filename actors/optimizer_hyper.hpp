// A learning-rate schedule's rate and betas for one update (optim/lr_schedule.hpp), set
// into LibTorch's optimizer: the shard owners' (a trainer's own optimizer) and the
// single-process reference's, so both follow the schedule alike.
// Thread safety: on the thread that owns the optimizer.
#pragma once

#include <torch/optim/optimizer.h>

#include "optim/lr_schedule.hpp"

namespace troupe {

/// Every parameter group's rate, and its betas where the optimizer has them (Adam, AdamW).
void set_hyper(torch::optim::Optimizer& optimizer, const UpdateHyper& hyper);

}  // namespace troupe
