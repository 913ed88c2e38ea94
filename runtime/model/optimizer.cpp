#include "runtime/model/optimizer.hpp"

#include <tuple>
#include <utility>

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "base/check.hpp"

namespace troupe {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& config,
                                                        std::vector<torch::Tensor> params) {
  switch (config.type) {
    case OptimizerType::adamw:
      return std::make_unique<torch::optim::AdamW>(std::move(params),
                                                   torch::optim::AdamWOptions(config.lr)
                                                       .betas(std::make_tuple(config.beta1, config.beta2))
                                                       .eps(config.eps)
                                                       .weight_decay(config.weight_decay));
    case OptimizerType::adam:
      return std::make_unique<torch::optim::Adam>(std::move(params),
                                                  torch::optim::AdamOptions(config.lr)
                                                      .betas(std::make_tuple(config.beta1, config.beta2))
                                                      .eps(config.eps)
                                                      .weight_decay(config.weight_decay));
    case OptimizerType::sgd:
      return std::make_unique<torch::optim::SGD>(std::move(params), torch::optim::SGDOptions(config.lr)
                                                                        .momentum(config.momentum)
                                                                        .nesterov(config.nesterov)
                                                                        .weight_decay(config.weight_decay));
  }
  TROUPE_CHECK(false, "unknown OptimizerType");
  return nullptr;
}

}  // namespace troupe
