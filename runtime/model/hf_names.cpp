#include "runtime/model/hf_names.hpp"

#include <map>

namespace troupe {
namespace {

struct Mapping {
  const char* hf;
  bool transposed;
};

using Table = std::map<std::string, Mapping>;

const Table& whole_tensors(bool llama) {
  static const Table kLlama = {{"embedding.token.weight", {"model.embed_tokens.weight", false}},
                               {"head.norm.weight", {"model.norm.weight", false}},
                               {"head.lm_head.weight", {"lm_head.weight", false}}};
  static const Table kGpt2 = {{"embedding.token.weight", {"transformer.wte.weight", false}},
                              {"embedding.position.weight", {"transformer.wpe.weight", false}},
                              {"head.norm.weight", {"transformer.ln_f.weight", false}},
                              {"head.norm.bias", {"transformer.ln_f.bias", false}},
                              {"head.lm_head.weight", {"lm_head.weight", false}}};
  return llama ? kLlama : kGpt2;
}

// Within block N: troupe's name after "blockN." -> Hugging Face's after its block prefix.
const Table& block_tensors(bool llama) {
  static const Table kLlama = {{"norm_attention.weight", {"input_layernorm.weight", false}},
                               {"q.weight", {"self_attn.q_proj.weight", false}},
                               {"k.weight", {"self_attn.k_proj.weight", false}},
                               {"v.weight", {"self_attn.v_proj.weight", false}},
                               {"o.weight", {"self_attn.o_proj.weight", false}},
                               {"norm_mlp.weight", {"post_attention_layernorm.weight", false}},
                               {"gate.weight", {"mlp.gate_proj.weight", false}},
                               {"up.weight", {"mlp.up_proj.weight", false}},
                               {"down.weight", {"mlp.down_proj.weight", false}}};
  static const Table kGpt2 = {{"norm_attention.weight", {"ln_1.weight", false}},
                              {"norm_attention.bias", {"ln_1.bias", false}},
                              {"qkv.weight", {"attn.c_attn.weight", true}},
                              {"qkv.bias", {"attn.c_attn.bias", false}},
                              {"attention_projection.weight", {"attn.c_proj.weight", true}},
                              {"attention_projection.bias", {"attn.c_proj.bias", false}},
                              {"norm_mlp.weight", {"ln_2.weight", false}},
                              {"norm_mlp.bias", {"ln_2.bias", false}},
                              {"mlp_in.weight", {"mlp.c_fc.weight", true}},
                              {"mlp_in.bias", {"mlp.c_fc.bias", false}},
                              {"mlp_out.weight", {"mlp.c_proj.weight", true}},
                              {"mlp_out.bias", {"mlp.c_proj.bias", false}}};
  return llama ? kLlama : kGpt2;
}

bool ends_with(const std::string& text, const std::string& end) {
  return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
}

}  // namespace

HfName hf_name(const ModelConfig& model, const std::string& name) {
  const bool llama = model.type == "llama";
  const Table& whole = whole_tensors(llama);
  if (auto found = whole.find(name); found != whole.end())
    return {found->second.hf, found->second.transposed};
  const auto dot = name.find('.');
  if (name.rfind("block", 0) != 0 || dot == std::string::npos) return {};
  const Table& block = block_tensors(llama);
  auto part = block.find(name.substr(dot + 1));
  if (part == block.end()) return {};
  const std::string index = name.substr(5, dot - 5);
  return {(llama ? "model.layers." : "transformer.h.") + index + "." + part->second.hf,
          part->second.transposed};
}

std::string hf_canonical_name(const ModelConfig& model, const std::string& name) {
  if (model.type == "llama" || name.rfind("transformer.", 0) == 0 || name.rfind("lm_head.", 0) == 0)
    return name;
  return "transformer." + name;
}

bool hf_buffer(const ModelConfig& model, const std::string& name) {
  return model.type != "llama" && (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias"));
}

}  // namespace troupe
