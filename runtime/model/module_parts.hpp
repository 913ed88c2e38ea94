// Looking up a built model's parts by name, for the tensor-parallel models that take their
// shards from the plain model (gpt_tensor_parallel.cpp, llama_tensor_parallel.cpp).
// Thread safety: reads the module only.
#pragma once

#include <memory>
#include <string>

#include <torch/nn/module.h>

#include "base/check.hpp"

namespace troupe {

/// The parameter `name` of `module` (e.g. "qkv.weight"); a missing one is a programming error.
inline torch::Tensor parameter(const torch::nn::Module& module, const std::string& name) {
  const auto named = module.named_parameters();
  const torch::Tensor* found = named.find(name);
  TROUPE_CHECK(found != nullptr, ("the layer has the parameter " + name).c_str());
  return *found;
}

/// The child module `name` of `module`, as its holder type (torch::nn::LayerNorm, ...).
template <class ModuleType>
ModuleType child(const torch::nn::Module& module, const std::string& name) {
  auto found = module.named_children()[name];
  auto typed = std::dynamic_pointer_cast<typename ModuleType::ContainedType>(found);
  TROUPE_CHECK(typed != nullptr, ("the layer has the module " + name).c_str());
  return ModuleType(typed);
}

}  // namespace troupe
