// A Hugging Face folder's config.json as [model] keys, for the families troupe builds:
// "llama" (LlamaForCausalLM) and "gpt2" (GPT2LMHeadModel). Reading refuses, naming the key,
// what troupe's model would compute differently (biases in LLaMA, scaled rotary
// embeddings, another activation); checking names each [model] key that differs.
// Thread safety: pure functions of their arguments and the file.
#pragma once

#include <string>

#include "base/result.hpp"
#include "runtime/config/config.hpp"

namespace troupe {

/// The [model] keys `dir`/config.json gives: type, vocab_size, d_model, n_layers, n_heads,
/// n_kv_heads, d_ff, norm_eps, tie_embeddings; LLaMA's rope_theta; GPT-2's seq_len (its
/// learned positions) and activation.
Result<ModelConfig> read_hf_config(const std::string& dir);

/// Each [model] key of `model` that differs from `dir`/config.json, in one error.
Status check_hf_config(const std::string& dir, const ModelConfig& model);

/// config.json for `model` (what from_pretrained reads), as text.
Result<std::string> hf_config_text(const ModelConfig& model);

}  // namespace troupe
