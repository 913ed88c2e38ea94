// The built-in GPT split across a tensor-parallel group (Megatron-LM's layout): attention
// heads split across the group (a column-parallel fused q/k/v projection, each rank's
// heads attended locally, a row-parallel output projection), the MLP split in its hidden
// width (column-parallel in, row-parallel out), the vocabulary split in the token
// embedding and the head, whose logits stay split into the vocabulary-parallel
// cross-entropy. LayerNorms, the position embedding and the row-parallel biases are
// replicated. Under sequence parallelism the activations between layers hold this rank's
// piece of the sequence.
//
// The model is the one make_gpt() draws (same generator, same order), each rank keeping
// its shard, so it trains as the single-process model does; the layer list and the
// parameters' names and order are make_gpt()'s, with shards for the split tensors.
// Thread safety: as make_gpt().
#pragma once

#include <memory>

#include <torch/nn/modules/container/sequential.h>

#include "actors/micro_batch.hpp"
#include "runtime/config/config.hpp"
#include "runtime/model/tensor_parallel_group.hpp"

namespace troupe {

/// `model` must be resolved and divisible by the group (the config's checks).
torch::nn::Sequential make_tensor_parallel_gpt(const ModelConfig& model,
                                               const std::shared_ptr<TensorParallelGroup>& group);
/// The same cut from `full`, a make_gpt model of `model` whatever its values.
torch::nn::Sequential split_tensor_parallel_gpt(const torch::nn::Sequential& full, const ModelConfig& model,
                                                const std::shared_ptr<TensorParallelGroup>& group);

/// The loss of the tensor-parallel GPT's split logits: the vocabulary-parallel cross-entropy.
LossFunction tensor_parallel_gpt_loss(const std::shared_ptr<TensorParallelGroup>& group);

}  // namespace troupe
