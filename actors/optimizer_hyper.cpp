#include "actors/optimizer_hyper.hpp"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

#include <tuple>

namespace troupe {

void set_hyper(torch::optim::Optimizer& optimizer, const UpdateHyper& hyper) {
  for (auto& group : optimizer.param_groups()) {
    auto& options = group.options();
    if (hyper.lr) options.set_lr(*hyper.lr);
    if (!hyper.beta1 && !hyper.beta2) continue;
    auto betas = [&](std::tuple<double, double>& b) {
      b = {hyper.beta1.value_or(std::get<0>(b)), hyper.beta2.value_or(std::get<1>(b))};
    };
    if (auto* adam = dynamic_cast<torch::optim::AdamOptions*>(&options)) betas(adam->betas());
    if (auto* adamw = dynamic_cast<torch::optim::AdamWOptions*>(&options)) betas(adamw->betas());
  }
}

}  // namespace troupe
