// Builds the LibTorch optimizer a job's [optimizer] section describes.
//
// Both the reference trainer and the distributed runtime use this one factory, so the
// update rule is bit-for-bit the same wherever a parameter (or a shard of one) is updated.
// Thread safety: the returned optimizer belongs to the caller's thread.
#pragma once

#include <memory>
#include <vector>

#include <torch/optim/optimizer.h>

#include "runtime/config/config.hpp"

namespace troupe {

/// adamw -> torch::optim::AdamW (decoupled weight decay), adam -> Adam (L2 weight decay),
/// sgd -> SGD (momentum, nesterov, L2 weight decay, no dampening), all with the config's
/// lr, betas, eps and weight_decay. The config must be valid: SGD with nesterov needs
/// momentum > 0 (LibTorch throws c10::Error otherwise).
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& config,
                                                        std::vector<torch::Tensor> params);

}  // namespace troupe
