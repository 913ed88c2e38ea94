#include "runtime/model/linear.hpp"

#include <torch/autograd.h>
#include <torch/torch.h>

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
    torch::Tensor grad_weight;
    torch::Tensor grad_bias;
    if (ctx->needs_input_grad(0)) grad_x = grad.matmul(weight);
    if (ctx->needs_input_grad(1)) grad_weight = grad_2d.t().mm(x.reshape({-1, x.size(-1)}));
    // Without a bias there are only two graph inputs, so index 2 must not be asked about.
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)) grad_bias = grad_2d.sum(0);
    return {grad_x, grad_weight, grad_bias};
  }
};

}  // namespace

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  return LinearFunction::apply(x, weight, bias.defined() ? c10::optional<torch::Tensor>(bias) : c10::nullopt);
}

}  // namespace troupe
