// The built-in GPT's parameters from its shapes alone: what make_gpt() registers, layer by
// layer and in the same order, without making a tensor. `troupe estimate` plans a model of
// any size from it in microseconds; model_test holds it to make_gpt() element for element.
// Thread safety: a pure function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/result.hpp"
#include "runtime/config/config.hpp"

namespace troupe {

struct GptShape {
  /// By layer (embedding, blocks, head): the element counts of the tensors it owns.
  std::vector<std::vector<std::size_t>> layers;
  /// By layer: tensors it uses that an earlier layer owns, as indices in model order (the
  /// tied head borrows the token embedding, index 0).
  std::vector<std::vector<std::size_t>> borrowed;
  int64_t parameters = 0;  ///< elements of every tensor, each counted once
};

/// `model` must be resolved (d_ff set). With `tp` > 1: one rank's shard of the model as
/// make_tensor_parallel_gpt() splits it (heads, MLP width and vocabulary divided by tp).
GptShape gpt_shape(const ModelConfig& model, int64_t tp = 1);

/// Whether `job`'s pipeline fits the built-in GPT it trains (n_layers + 2 layers); the
/// error names the key and its line.
Status check_gpt_pipeline(const JobConfig& job);

}  // namespace troupe
