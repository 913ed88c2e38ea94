// The built-in model's parameters from its shapes alone: what make_model() registers for
// its family (GPT or LLaMA), layer by layer and in the same order, without making a tensor.
// `troupe estimate` plans a model of any size from it in microseconds; model_test holds it
// to make_model() element for element.
// Thread safety: a pure function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/result.hpp"
#include "runtime/config/config.hpp"

namespace troupe {

struct ModelShape {
  /// By layer (embedding, blocks, head): the element counts of the tensors it owns.
  std::vector<std::vector<std::size_t>> layers;
  /// By layer: tensors it uses that an earlier layer owns, as indices in model order (the
  /// tied head borrows the token embedding, index 0).
  std::vector<std::vector<std::size_t>> borrowed;
  int64_t parameters = 0;  ///< elements of every tensor, each counted once
};

/// `model` must be resolved (d_ff set). With `tp` > 1: one rank's shard of the model as
/// make_tensor_parallel_model() splits it (heads, MLP width and vocabulary divided by tp).
ModelShape model_shape(const ModelConfig& model, int64_t tp = 1);

/// Whether `job`'s pipeline fits the built-in model it trains (n_layers + 2 layers); the
/// error names the key and its line.
Status check_model_pipeline(const JobConfig& job);

}  // namespace troupe
