// ModelParameters: the trainable tensors of a layer sequence, each once, and which
// layers use them — what ZeRO lays out, reduces, partitions and updates.
//
// A tensor may be used by several layers (a GPT's embedding tied to its output head) or
// be registered twice in one. Sharing is found by identity of the tensor itself (its
// TensorImpl, so its storage too), not by name: the tensor belongs to the first layer
// that uses it and later layers borrow it. Autograd sums the gradients of every use
// into the one tensor, as in plain LibTorch.
//
// What troupe cannot train correctly is refused here, before anything starts, with a
// sentence naming the parameter: two different tensors whose memory overlaps (one a
// view of the other, so updating both would update that memory twice), a parameter
// that is not fp32, one that does not require a gradient, parameters on two devices.
// Thread safety: a plain value; model_parameters() reads the model.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/types.h>

#include <cstddef>
#include <string>
#include <vector>

#include "base/result.hpp"

namespace troupe {

struct ModelParameters {
  std::vector<torch::Tensor> tensors;  ///< each once, in the order the layers first use them
  std::vector<std::string> names;      ///< by tensor: "layer.path.name" where first used
  /// By layer: the tensors it is the first to use (consecutive indices into `tensors`).
  std::vector<std::vector<std::size_t>> owned;
  /// By layer: the tensors it uses that an earlier layer owns.
  std::vector<std::vector<std::size_t>> borrowed;

  /// By layer, the element counts of the tensors it owns (ZeroPlanInput::layers).
  std::vector<std::vector<std::size_t>> owned_counts() const;
  /// Elements of every tensor, each counted once.
  int64_t elements() const;
};

/// The parameters of `module` and its children, each tensor once (module.parameters()
/// lists a tensor registered twice twice), in the order they first appear.
std::vector<torch::Tensor> unique_parameters(const torch::nn::Module& module);

/// The trainable tensors of `model`'s layers (its children, in order), or an error that
/// names the parameter troupe cannot train and why.
Result<ModelParameters> model_parameters(const torch::nn::Sequential& model);

}  // namespace troupe
