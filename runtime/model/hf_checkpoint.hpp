// Hugging Face checkpoints in and out: a folder of config.json (hf_config.hpp) and
// model.safetensors (or shards listed by model.safetensors.index.json), as save_pretrained
// writes and from_pretrained reads, for LlamaForCausalLM and GPT2LMHeadModel (names:
// hf_names.hpp). Every tensor of the model must be in the folder and every tensor of the
// folder in the model, with the same shape, or the load is refused naming it, before
// anything is copied.
// Thread safety: pure functions of their arguments and the files.
#pragma once

#include <string>

#include "base/result.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/config/config.hpp"
#include "runtime/model/hf_config.hpp"

namespace troupe {

struct ModelParameters;

/// Whether `path` is a folder holding a config.json (what init_from takes as Hugging Face's).
bool is_hf_folder(const std::string& path);

/// `dir`'s weights into `model`'s tensors (cast to their dtype), by name, after
/// check_hf_config(dir, config).
Status load_hf_folder(const std::string& dir, const ModelConfig& config, ModelParameters& model);

/// `parameters` (a consolidated checkpoint of a `config` model) as a Hugging Face folder:
/// config.json and model.safetensors in fp32. `dir` is made if missing.
Status write_hf_folder(const std::string& dir, const ModelConfig& config,
                       const ConsolidatedParameters& parameters);

}  // namespace troupe
