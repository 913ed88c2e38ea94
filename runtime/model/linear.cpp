#include "runtime/model/linear.hpp"

#include <torch/autograd.h>
#include <torch/torch.h>

#include "actors/deferred_weights.hpp"

namespace troupe {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class LinearFunction : public torch::autograd::Function<LinearFunction> {
 public:
  // The bias comes as an optional: LibTorch 1.13 cannot take an undefined tensor as a
  // Function input, and an empty optional is simply not an input of the graph.
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const c10::optional<torch::Tensor>& bias) {
    // The weight is saved as itself, never as a view or transpose of it: under ZeRO stage 3
    // a partitioned parameter's data is swapped out after forward and gathered back in
    // before backward, and backward must re-read the parameter to see the gathered data.
    // The bias is saved too, as itself: a split backward's weight half accumulates into it.
    if (bias.has_value())
      ctx->save_for_backward({x, weight, *bias});
    else
      ctx->save_for_backward({x, weight});
    ctx->saved_data["has_bias"] = bias.has_value();
    return torch::linear(x, weight, bias);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor& grad = grad_outputs[0];
    const int64_t out_features = grad.size(-1);
    // [..., out] -> [N, out]: the leading dims fold into one.
    const torch::Tensor grad_2d = grad.reshape({-1, out_features});

    torch::Tensor grad_x;
    if (ctx->needs_input_grad(0)) grad_x = grad.matmul(weight);
    // Without a bias there are only two graph inputs, so index 2 must not be asked about.
    const bool needs_bias = ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2);
    auto [grad_weight, grad_bias] = linear_weight_gradients(
        x.reshape({-1, x.size(-1)}), grad_2d, ctx->needs_input_grad(1) ? weight : torch::Tensor(),
        needs_bias ? saved[2] : torch::Tensor());
    return {grad_x, grad_weight, grad_bias};
  }
};

}  // namespace

std::pair<torch::Tensor, torch::Tensor> linear_weight_gradients(const torch::Tensor& x_2d,
                                                                const torch::Tensor& grad_2d,
                                                                const torch::Tensor& weight,
                                                                const torch::Tensor& bias) {
  if (DeferredWeights* deferred = DeferredWeights::active();
      deferred && (weight.defined() || bias.defined())) {
    // The input half of a split backward: the weights' gradients wait for the weight
    // half, which needs only x and the output's gradient. The parameters stay out of
    // this pass (undefined gradients), so their accumulators add nothing now.
    deferred->defer([x_2d, grad_2d, weight, bias] {
      std::vector<std::pair<torch::Tensor, torch::Tensor>> out;
      if (weight.defined()) out.emplace_back(weight, grad_2d.t().mm(x_2d));
      if (bias.defined()) out.emplace_back(bias, grad_2d.sum(0));
      return out;
    });
    return {};
  }
  return {weight.defined() ? grad_2d.t().mm(x_2d) : torch::Tensor(),
          bias.defined() ? grad_2d.sum(0) : torch::Tensor()};
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  return LinearFunction::apply(x, weight, bias.defined() ? c10::optional<torch::Tensor>(bias) : c10::nullopt);
}

}  // namespace troupe
