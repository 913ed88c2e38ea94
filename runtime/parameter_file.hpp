// One file of a model's parameters, by name: what `troupe export` writes from a checkpoint
// and what [model] init_from starts a model from. The file is torch.save's archive of a
// plain dict of name → fp32 tensor, which PyTorch's torch.load (weights_only, its default)
// and LibTorch's torch::pickle_load read without troupe; a dict saved by torch.save loads too.
#pragma once

#include <string>

#include "base/result.hpp"
#include "runtime/checkpoint.hpp"

namespace troupe {

struct ModelParameters;

/// Writes `parameters` (in model order) to `path`; an error names the path.
Status write_parameter_file(const std::string& path, const ConsolidatedParameters& parameters);

/// Copies the file's tensors into `model`'s, by name: a parameter missing from the file, a
/// shape that differs, or a name the model does not have is an error naming it and `path`.
Status load_parameter_file(const std::string& path, ModelParameters& model);

/// [model] init_from into `model`: a Hugging Face folder (hf_checkpoint.hpp, checked against
/// `config`) or a parameter file.
Status load_initial_parameters(const ModelConfig& config, ModelParameters& model);

}  // namespace troupe
