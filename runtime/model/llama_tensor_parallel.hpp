// The LLaMA family split across a tensor-parallel group, Megatron-core's layout for it:
// query heads and key/value heads split across the group (q, k and v column-parallel,
// each rank attending its query heads with the key/value heads they share), the output
// projection row-parallel, SwiGLU's gate and up column-parallel and down row-parallel,
// the vocabulary split in the embedding and the head (the vocabulary-parallel
// cross-entropy, tensor_parallel_gpt_loss). RMSNorms are replicated. The input of q, k
// and v is gathered once (one all-gather along the sequence under sequence parallelism,
// or the identity whose gradient is summed), and so is that of gate and up.
//
// The model is the one make_llama() draws, each rank keeping its shard: names, order and
// layers are make_llama()'s. Thread safety: as make_llama().
#pragma once

#include <memory>

#include <torch/nn/modules/container/sequential.h>

#include "runtime/config/config.hpp"
#include "runtime/model/tensor_parallel_group.hpp"

namespace troupe {

/// `model` must be resolved and its heads, key/value heads, d_ff and vocabulary divisible
/// by the group's size (the config's checks).
torch::nn::Sequential make_tensor_parallel_llama(const ModelConfig& model,
                                                 const std::shared_ptr<TensorParallelGroup>& group);
/// The same cut from `full`, a make_llama model of `model` whatever its values.
torch::nn::Sequential split_tensor_parallel_llama(const torch::nn::Sequential& full, const ModelConfig& model,
                                                  const std::shared_ptr<TensorParallelGroup>& group);

}  // namespace troupe
