// Looking up a built model's parts by name, and assembling a tensor-parallel model layer by
// layer from the plain one, for the families' tensor-parallel models
// (gpt_tensor_parallel.cpp, llama_tensor_parallel.cpp).
// Thread safety: reads the module only.
#pragma once

#include <memory>
#include <string>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>

#include "base/check.hpp"
#include "runtime/config/config.hpp"
#include "runtime/model/tensor_parallel_group.hpp"

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

/// The family's layers split across `group`, each made from `full`'s layer at the same place
/// (the plain model of the same draws): Embedding(layer, group), Block(layer, model, group)
/// for each block, Head(layer, group, the embedding's token shard when tied, else undefined).
template <class Embedding, class Block, class Head>
torch::nn::Sequential split_layers(const torch::nn::Sequential& full, const ModelConfig& model,
                                   const std::shared_ptr<TensorParallelGroup>& group) {
  torch::nn::Sequential layers;
  const auto children = full->named_children();
  Embedding embedding(*children[0].value(), group);
  layers->push_back("embedding", embedding);
  for (int64_t i = 0; i < model.n_layers; ++i)
    layers->push_back("block" + std::to_string(i),
                      Block(*children[static_cast<std::size_t>(i + 1)].value(), model, group));
  layers->push_back("head", Head(*children[children.size() - 1].value(), group,
                                 model.tie_embeddings ? embedding->token_weight() : torch::Tensor()));
  return layers;
}

}  // namespace troupe
