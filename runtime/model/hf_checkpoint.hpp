// Hugging Face checkpoints in and out: a folder of config.json and model.safetensors (or
// shards listed by model.safetensors.index.json), as save_pretrained writes and
// from_pretrained reads, for the LLaMA family (LlamaForCausalLM's names: model.layers.N.
// self_attn.q_proj.weight, ...). Names map one to one onto make_llama()'s; every tensor of
// the model must be in the folder and every tensor of the folder in the model, with the
// same shape, or the load is refused naming it, before anything is copied.
// Thread safety: pure functions of their arguments and the files.
#pragma once

#include <string>

#include "base/result.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/config/config.hpp"

namespace troupe {

struct ModelParameters;

/// Whether `path` is a folder holding a config.json (what init_from takes as Hugging Face's).
bool is_hf_folder(const std::string& path);

/// The [model] keys `dir`'s config.json gives (type, vocab_size, d_model, n_layers, n_heads,
/// n_kv_heads, d_ff, rope_theta, norm_eps, tie_embeddings); seq_len is left to the job. A
/// family or a feature troupe does not build (biases, rope scaling, another activation) is
/// an error naming the key.
Result<ModelConfig> read_hf_config(const std::string& dir);

/// Each [model] key of `model` that differs from `dir`'s config.json, in one error.
Status check_hf_config(const std::string& dir, const ModelConfig& model);

/// `dir`'s weights into `model`'s tensors (cast to their dtype), by name.
Status load_hf_folder(const std::string& dir, const ModelConfig& config, ModelParameters& model);

/// `parameters` (a consolidated checkpoint of a `config` model) as a Hugging Face folder:
/// config.json and model.safetensors in fp32. `dir` is made if missing.
Status write_hf_folder(const std::string& dir, const ModelConfig& config,
                       const ConsolidatedParameters& parameters);

}  // namespace troupe
