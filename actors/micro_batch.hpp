// LibTorch side of the actors' data types: a micro-batch's tensors, the loss and
// optimizer a trainer hands to the stage. Included only by actors that run LibTorch.
#pragma once

#include <torch/nn/modules/container/sequential.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <functional>
#include <memory>
#include <vector>

#include "actors/protocol/data.hpp"

namespace troupe {

struct MicroBatch {
  torch::Tensor input;
  torch::Tensor target;
};

/// Produces the micro-batch holding global samples [first_sample, first_sample + count).
using MicroBatchSource = std::function<MicroBatch(int64_t first_sample, int64_t count)>;
/// Scalar loss of a micro-batch from the last layer's output and the target.
using LossFunction = std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& target)>;
/// The layers (indices into the model's sequence) that run, in order, for micro-batch
/// `micro` of step `step`; every layer once, in order, when none is given. With ZeRO
/// stage 3 it must give every rank the same sequence.
using LayerSchedule = std::function<std::vector<int64_t>(int64_t step, int64_t micro)>;
/// Builds the optimizer over the given parameters.
using OptimizerFactory = std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;

}  // namespace troupe
