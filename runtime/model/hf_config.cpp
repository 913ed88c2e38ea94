#include "runtime/model/hf_config.hpp"

#include <fstream>
#include <optional>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace troupe {
namespace {

using Json = nlohmann::json;

Result<Json> read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error(fmt::format("cannot read {}", path));
  Json j = Json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return make_error(fmt::format("{} is not a JSON object", path));
  return j;
}

// config.json's fields, each checked, naming the file and the key.
class Fields {
 public:
  Fields(const Json& json, std::string path) : json_(json), path_(std::move(path)) {}

  Status integer(int64_t& field, const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    if ((!json_.contains(key) || json_[key].is_null()) && fallback) {
      field = *fallback;
      return {};
    }
    if (!json_.contains(key) || !json_[key].is_number_integer() || json_[key].get<int64_t>() < 0)
      return make_error(fmt::format("{}: {} must be a non-negative integer, got {}", path_, key,
                                    json_.contains(key) ? json_[key].dump() : "nothing"));
    field = json_[key].get<int64_t>();
    return {};
  }

  Status number(double& field, const char* key, double fallback, const Json* within = nullptr) const {
    const Json& j = within != nullptr ? *within : json_;
    if (!j.contains(key) || j[key].is_null()) {
      field = fallback;
      return {};
    }
    if (!j[key].is_number() || !(j[key].get<double>() > 0))
      return make_error(fmt::format("{}: {} must be a number above 0, got {}", path_, key, j[key].dump()));
    field = j[key].get<double>();
    return {};
  }

  Error refuse(const std::string& what) const { return make_error(fmt::format("{}: {}", path_, what)); }
  const Json& json() const { return json_; }

 private:
  const Json& json_;
  std::string path_;
};

// What LlamaForCausalLM can be asked for that make_llama() does not compute.
Status read_llama(const Fields& f, ModelConfig& m) {
  const Json& c = f.json();
  for (const char* key : {"attention_bias", "mlp_bias"})
    if (c.value(key, false)) return f.refuse(fmt::format("{} = true: troupe's LLaMA has no biases", key));
  if (c.value("hidden_act", std::string("silu")) != "silu")
    return f.refuse(
        fmt::format("hidden_act = {}: troupe's LLaMA gates with silu (SwiGLU)", c["hidden_act"].dump()));
  const Json* rope = c.contains("rope_parameters") ? &c["rope_parameters"]
                     : c.contains("rope_scaling")  ? &c["rope_scaling"]
                                                   : nullptr;
  if (rope != nullptr && rope->is_object()) {
    const std::string type = rope->value("rope_type", rope->value("type", std::string("default")));
    if (type != "default")
      return f.refuse(
          fmt::format("rope_type = \"{}\": troupe's rotary embedding is the default one (no scaling)", type));
  }
  TROUPE_TRY(f.integer(m.vocab_size, "vocab_size"));
  TROUPE_TRY(f.integer(m.d_model, "hidden_size"));
  TROUPE_TRY(f.integer(m.n_layers, "num_hidden_layers"));
  TROUPE_TRY(f.integer(m.n_heads, "num_attention_heads"));
  TROUPE_TRY(f.integer(m.n_kv_heads, "num_key_value_heads", m.n_heads));
  TROUPE_TRY(f.integer(m.d_ff, "intermediate_size"));
  if (m.n_heads == 0 || m.d_model % m.n_heads != 0)
    return f.refuse(
        fmt::format("hidden_size = {} is not divisible by num_attention_heads = {}", m.d_model, m.n_heads));
  int64_t head_dim = 0;
  TROUPE_TRY(f.integer(head_dim, "head_dim", m.d_model / m.n_heads));
  if (head_dim != m.d_model / m.n_heads)
    return f.refuse(
        fmt::format("head_dim = {}: troupe's heads are hidden_size / num_attention_heads = {} wide", head_dim,
                    m.d_model / m.n_heads));
  TROUPE_TRY(f.number(m.rope_theta, "rope_theta", 10000.0,
                      rope != nullptr && rope->contains("rope_theta") ? rope : nullptr));
  TROUPE_TRY(f.number(m.norm_eps, "rms_norm_eps", 1e-6));
  m.tie_embeddings = c.value("tie_word_embeddings", false);
  return {};
}

// GPT2LMHeadModel: learned positions (n_positions of them: troupe's seq_len), LayerNorms,
// a GELU MLP; gelu_new is the tanh form.
Status read_gpt2(const Fields& f, ModelConfig& m) {
  const Json& c = f.json();
  const std::string activation = c.value("activation_function", std::string("gelu_new"));
  if (activation != "gelu_new" && activation != "gelu")
    return f.refuse(
        fmt::format("activation_function = \"{}\": troupe's GPT takes \"gelu_new\" or \"gelu\"", activation));
  m.activation = activation == "gelu_new" ? "gelu_tanh" : "gelu";
  for (const char* key : {"scale_attn_by_inverse_layer_idx", "add_cross_attention"})
    if (c.value(key, false))
      return f.refuse(fmt::format("{} = true: troupe's GPT has no such attention", key));
  if (!c.value("scale_attn_weights", true))
    return f.refuse("scale_attn_weights = false: troupe's GPT scales its scores by 1/sqrt(head width)");
  TROUPE_TRY(f.integer(m.vocab_size, "vocab_size"));
  TROUPE_TRY(f.integer(m.d_model, "n_embd"));
  TROUPE_TRY(f.integer(m.n_layers, "n_layer"));
  TROUPE_TRY(f.integer(m.n_heads, "n_head"));
  TROUPE_TRY(f.integer(m.seq_len, "n_positions"));
  TROUPE_TRY(f.integer(m.d_ff, "n_inner", 4 * m.d_model));
  m.n_kv_heads = m.n_heads;
  TROUPE_TRY(f.number(m.norm_eps, "layer_norm_epsilon", 1e-5));
  m.tie_embeddings = c.value("tie_word_embeddings", true);
  return {};
}

}  // namespace

Result<ModelConfig> read_hf_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  auto json = read_json(path);
  if (!json) return json.error();
  const Fields fields(*json, path);
  const std::string type = json->value("model_type", std::string());
  ModelConfig m;
  if (type == "llama") {
    m.type = "llama";
    TROUPE_TRY(read_llama(fields, m));
  } else if (type == "gpt2") {
    m.type = "gpt";
    TROUPE_TRY(read_gpt2(fields, m));
  } else {
    return fields.refuse(
        fmt::format("model_type = \"{}\": troupe loads Hugging Face's \"llama\" and \"gpt2\" models", type));
  }
  return m;
}

Status check_hf_config(const std::string& dir, const ModelConfig& model) {
  auto theirs = read_hf_config(dir);
  if (!theirs) return theirs.error();
  if (model.type != theirs->type)
    return make_error(fmt::format("{}/config.json is a \"{}\" model; [model] type = \"{}\"", dir,
                                  theirs->type == "gpt" ? "gpt2" : theirs->type, model.type));
  const bool llama = model.type == "llama";
  std::vector<std::string> differ;
  auto compare = [&](const char* key, const char* hf_key, auto mine, auto given) {
    if (mine != given)
      differ.push_back(fmt::format("[model] {} = {} where its {} = {}", key, mine, hf_key, given));
  };
  compare("vocab_size", "vocab_size", model.vocab_size, theirs->vocab_size);
  compare("d_model", llama ? "hidden_size" : "n_embd", model.d_model, theirs->d_model);
  compare("n_layers", llama ? "num_hidden_layers" : "n_layer", model.n_layers, theirs->n_layers);
  compare("n_heads", llama ? "num_attention_heads" : "n_head", model.n_heads, theirs->n_heads);
  compare("d_ff", llama ? "intermediate_size" : "n_inner", model.d_ff, theirs->d_ff);
  compare("norm_eps", llama ? "rms_norm_eps" : "layer_norm_epsilon", model.norm_eps, theirs->norm_eps);
  compare("tie_embeddings", "tie_word_embeddings", model.tie_embeddings, theirs->tie_embeddings);
  if (llama) {
    compare("n_kv_heads", "num_key_value_heads", model.n_kv_heads, theirs->n_kv_heads);
    compare("rope_theta", "rope_theta", model.rope_theta, theirs->rope_theta);
  } else {
    compare("seq_len", "n_positions", model.seq_len, theirs->seq_len);
    if (model.activation != theirs->activation)  // said in each one's own words
      differ.push_back(fmt::format("[model] activation = \"{}\" where its activation_function = \"{}\"",
                                   model.activation,
                                   theirs->activation == "gelu_tanh" ? "gelu_new" : "gelu"));
  }
  if (differ.empty()) return {};
  return make_error(fmt::format("[model] init_from: {}/config.json describes another model: {}", dir,
                                fmt::join(differ, "; ")));
}

Result<std::string> hf_config_text(const ModelConfig& m) {
  Json hf;
  if (m.type == "llama") {
    hf = {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"vocab_size", m.vocab_size},
          {"hidden_size", m.d_model},
          {"intermediate_size", m.d_ff},
          {"num_hidden_layers", m.n_layers},
          {"num_attention_heads", m.n_heads},
          {"num_key_value_heads", m.n_kv_heads},
          {"head_dim", m.d_model / m.n_heads},
          {"max_position_embeddings", m.seq_len},
          {"rms_norm_eps", m.norm_eps},
          {"rope_theta", m.rope_theta},
          {"hidden_act", "silu"},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"tie_word_embeddings", m.tie_embeddings}};
  } else if (m.type == "gpt") {
    hf = {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"vocab_size", m.vocab_size},
          {"n_embd", m.d_model},
          {"n_layer", m.n_layers},
          {"n_head", m.n_heads},
          {"n_positions", m.seq_len},
          {"n_inner", m.d_ff},
          {"layer_norm_epsilon", m.norm_eps},
          {"activation_function", m.activation == "gelu_tanh" ? "gelu_new" : "gelu"},
          {"embd_pdrop", 0.0},  // troupe's GPT has no dropout
          {"attn_pdrop", 0.0},
          {"resid_pdrop", 0.0},
          {"tie_word_embeddings", m.tie_embeddings}};
  } else {
    return make_error(fmt::format("no Hugging Face family for [model] type = \"{}\"", m.type));
  }
  hf["dtype"] = "float32";
  return hf.dump(2) + "\n";
}

}  // namespace troupe
