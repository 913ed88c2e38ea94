// The built-in model's floating-point work per layer (GPT or LLaMA), from its shapes alone: the FLOPs of its
// matrix products (2 per multiply-add, as MFU counts them; LayerNorm, GELU and softmax are
// left out, as in the 6·N·tokens rule and Megatron's MFU), forward and backward. `troupe
// profile` puts them beside measured times; the simulator will turn them into delays.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/config/config.hpp"

namespace troupe {

struct LayerFlops {
  std::string name;        ///< as make_model() names the layer: embedding, block0.., head
  int64_t parameters = 0;  ///< the tensors the layer owns (a tied head owns its LayerNorm only)
  double forward = 0;      ///< FLOPs of one forward pass over the micro-batch
  double backward = 0;     ///< FLOPs of its backward: the input's and the weights' gradients
};

/// Per layer, for a micro-batch of `batch` sequences of `seq` tokens, on one rank of a
/// tensor-parallel group of `tp` (heads, MLP width and vocabulary divided by tp). `model`
/// must be resolved (d_ff set).
std::vector<LayerFlops> model_layer_flops(const ModelConfig& model, int64_t batch, int64_t seq,
                                          int64_t tp = 1);

/// Each layer's forward and backward FLOPs over the job's micro-batch: what [pipeline]
/// partition = "flops" balances across stages (the embedding costs nothing, the head a
/// block's vocab/(12·d_model) or so). `job` must be resolved.
std::vector<double> model_layer_costs(const JobConfig& job);

}  // namespace troupe
