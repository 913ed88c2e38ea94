// The built-in model families by [model] type: "gpt" (gpt.hpp) and "llama" (llama.hpp),
// whole or split across a tensor-parallel group. A family is a flat list of layers
// (embedding, block0.., head) with the same loss, so everything else (pipelines, ZeRO,
// offload, checkpoints) takes any of them.
// Thread safety: as the families' constructors.
#pragma once

#include <memory>

#include <torch/nn/modules/container/sequential.h>

#include "runtime/config/config.hpp"
#include "runtime/model/tensor_parallel_group.hpp"

namespace troupe {

/// The model `model.type` names, drawn from torch's global generator (resolved config).
torch::nn::Sequential make_model(const ModelConfig& model);

/// The same model split across `group`, each rank keeping its shard of the same draws.
torch::nn::Sequential make_tensor_parallel_model(const ModelConfig& model,
                                                 const std::shared_ptr<TensorParallelGroup>& group);

/// `full` (make_model's, whatever its values: a checkpoint's, a Hugging Face folder's) split
/// across `group`, each rank keeping its shard.
torch::nn::Sequential split_tensor_parallel_model(const torch::nn::Sequential& full, const ModelConfig& model,
                                                  const std::shared_ptr<TensorParallelGroup>& group);

}  // namespace troupe
