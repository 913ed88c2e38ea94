// troupe's parameter names against Hugging Face's, by family: make_llama()'s against
// LlamaForCausalLM's (one to one), make_gpt()'s against GPT2LMHeadModel's, whose Conv1D
// layers store their weights transposed ([in, out]).
// Thread safety: pure functions.
#pragma once

#include <string>

#include "runtime/config/config.hpp"

namespace troupe {

struct HfName {
  std::string name;         ///< Hugging Face's name; "" when the family has no such tensor
  bool transposed = false;  ///< stored as the transpose of troupe's [out, in]
};

/// Hugging Face's name of troupe's tensor `name` in a `model` model.
HfName hf_name(const ModelConfig& model, const std::string& name);

/// A name as found in a folder, in the form hf_name() gives: GPT-2's base-model files
/// (GPT2Model's, such as the hub's "gpt2") leave out the "transformer." prefix.
std::string hf_canonical_name(const ModelConfig& model, const std::string& name);

/// Whether a folder's tensor is a buffer, not a parameter, which loading passes over (older
/// GPT-2 files carry each block's causal mask, attn.bias and attn.masked_bias).
bool hf_buffer(const ModelConfig& model, const std::string& name);

}  // namespace troupe
