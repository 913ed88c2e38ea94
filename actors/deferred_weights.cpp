#include "actors/deferred_weights.hpp"

#include <torch/autograd.h>

namespace troupe {
namespace {

thread_local DeferredWeights* open_deferral = nullptr;

}  // namespace

DeferredWeights* DeferredWeights::active() {
  return open_deferral;
}

DeferredWeights::Scope::Scope(DeferredWeights& into) : previous_(open_deferral) {
  open_deferral = &into;
}

DeferredWeights::Scope::~Scope() {
  open_deferral = previous_;
}

void DeferredWeights::run() {
  std::vector<torch::Tensor> parameters, gradients;
  for (Work& work : work_)
    for (auto& [parameter, gradient] : work()) {
      parameters.push_back(std::move(parameter));
      gradients.push_back(std::move(gradient));
    }
  work_.clear();
  // A leaf's gradient edge is its accumulator: this adds into .grad and runs its hooks.
  if (!parameters.empty()) torch::autograd::backward(parameters, gradients);
}

}  // namespace troupe
