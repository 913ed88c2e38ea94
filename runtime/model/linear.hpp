// A linear layer (y = x·Wᵀ + b) whose autograd node keeps the weight parameter itself.
//
// torch::nn::Linear's forward saves `weight.t()` for backward: a view that holds the
// weight's storage as it was at forward time. ZeRO stage 3 swaps a parameter's data out
// after forward (param.set_data(empty)) and back in before backward, so a saved view would
// keep the full weight alive and go stale. linear() saves the parameter tensor instead, so
// backward re-reads whatever data the parameter holds when the gradient is computed.
// Thread safety: a pure function of its arguments.
#pragma once

#include <utility>

#include <torch/types.h>

namespace troupe {

/// x [..., in], weight [out, in], bias [out] or undefined (no bias) -> [..., out].
/// Gradients: x gets g·W, weight gets g2ᵀ·x2 (g and x flattened to 2-D), bias gets the sum
/// of g over every leading dim. Numerically the same as torch::nn::functional::linear.
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

/// The weight's and the bias's gradients of y = x·Wᵀ + b from x and the output's gradient,
/// both flattened to [N, ·]; pass `weight` or `bias` undefined when its gradient is not
/// needed. Inside a split backward's input half (DeferredWeights) the work is handed to the
/// weight half and both come back undefined. linear() and the tensor-parallel layers use it.
std::pair<torch::Tensor, torch::Tensor> linear_weight_gradients(const torch::Tensor& x_2d,
                                                                const torch::Tensor& grad_2d,
                                                                const torch::Tensor& weight,
                                                                const torch::Tensor& bias);

}  // namespace troupe
