#include "runtime/model/hf_checkpoint.hpp"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "actors/model_parameters.hpp"
#include "runtime/model/safetensors.hpp"

namespace troupe {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr const char* kIndex = "model.safetensors.index.json";
constexpr const char* kWeights = "model.safetensors";

Result<Json> read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error(fmt::format("cannot read {}", path));
  Json j = Json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return make_error(fmt::format("{} is not a JSON object", path));
  return j;
}

// A config.json number, checked: `fallback` when absent (or null) and one is given.
Result<int64_t> integer(const Json& config, const std::string& path, const char* key,
                        std::optional<int64_t> fallback = std::nullopt) {
  if ((!config.contains(key) || config[key].is_null()) && fallback) return *fallback;
  if (!config.contains(key) || !config[key].is_number_integer() || config[key].get<int64_t>() < 0)
    return make_error(fmt::format("{}: {} must be a non-negative integer, got {}", path, key,
                                  config.contains(key) ? config[key].dump() : "nothing"));
  return config[key].get<int64_t>();
}

Result<double> number(const Json& config, const std::string& path, const char* key, double fallback) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  if (!config[key].is_number() || !(config[key].get<double>() > 0))
    return make_error(fmt::format("{}: {} must be a number above 0, got {}", path, key, config[key].dump()));
  return config[key].get<double>();
}

// What LlamaForCausalLM can be asked for that make_llama() does not build.
Status check_llama_features(const Json& config, const std::string& path) {
  for (const char* key : {"attention_bias", "mlp_bias"})
    if (config.value(key, false))
      return make_error(fmt::format("{}: {} = true: troupe's LLaMA has no biases", path, key));
  if (config.value("hidden_act", std::string("silu")) != "silu")
    return make_error(fmt::format("{}: hidden_act = {}: troupe's LLaMA gates with silu (SwiGLU)", path,
                                  config["hidden_act"].dump()));
  const Json* rope = config.contains("rope_parameters") ? &config["rope_parameters"]
                     : config.contains("rope_scaling")  ? &config["rope_scaling"]
                                                        : nullptr;
  if (rope != nullptr && rope->is_object()) {
    const std::string type = rope->value("rope_type", rope->value("type", std::string("default")));
    if (type != "default")
      return make_error(
          fmt::format("{}: rope_type = \"{}\": troupe's rotary embedding is the default one "
                      "(no scaling)",
                      path, type));
  }
  return {};
}

// troupe's name of a LLaMA tensor -> Hugging Face's; "" for a name the family lacks.
std::string hf_name(const std::string& name) {
  static const std::map<std::string, std::string> kWhole = {
      {"embedding.token.weight", "model.embed_tokens.weight"},
      {"head.norm.weight", "model.norm.weight"},
      {"head.lm_head.weight", "lm_head.weight"}};
  static const std::map<std::string, std::string> kBlock = {
      {"norm_attention.weight", "input_layernorm.weight"},
      {"q.weight", "self_attn.q_proj.weight"},
      {"k.weight", "self_attn.k_proj.weight"},
      {"v.weight", "self_attn.v_proj.weight"},
      {"o.weight", "self_attn.o_proj.weight"},
      {"norm_mlp.weight", "post_attention_layernorm.weight"},
      {"gate.weight", "mlp.gate_proj.weight"},
      {"up.weight", "mlp.up_proj.weight"},
      {"down.weight", "mlp.down_proj.weight"}};
  if (auto whole = kWhole.find(name); whole != kWhole.end()) return whole->second;
  const auto dot = name.find('.');
  if (name.rfind("block", 0) != 0 || dot == std::string::npos) return "";
  auto part = kBlock.find(name.substr(dot + 1));
  if (part == kBlock.end()) return "";
  return "model.layers." + name.substr(5, dot - 5) + "." + part->second;
}

struct Located {
  const SafetensorsFile* file;
  const SafetensorsEntry* entry;
};

// Every tensor of the folder, by name, from model.safetensors or the index's shards.
Result<std::map<std::string, Located>> index_folder(const std::string& dir,
                                                    std::vector<SafetensorsFile>& files) {
  std::vector<std::string> paths;
  const std::string index_path = dir + "/" + kIndex;
  Json weight_map;
  if (fs::exists(index_path)) {
    auto index = read_json(index_path);
    if (!index) return index.error();
    weight_map = index->value("weight_map", Json());
    if (!weight_map.is_object())
      return make_error(fmt::format("{}: weight_map is not an object of name -> file", index_path));
    std::set<std::string> shards;
    for (const auto& [name, file] : weight_map.items()) {
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos)
        return make_error(
            fmt::format("{}: {} maps to {}, not a file of the folder", index_path, name, file.dump()));
      shards.insert(file.get<std::string>());
    }
    for (const auto& shard : shards) paths.push_back(dir + "/" + shard);
  } else {
    paths.push_back(dir + "/" + kWeights);
  }
  files.reserve(paths.size());
  for (const auto& path : paths) {
    auto file = read_safetensors_header(path);
    if (!file) return file.error();
    files.push_back(std::move(*file));
  }
  std::map<std::string, Located> all;
  for (const SafetensorsFile& f : files)
    for (const auto& [name, entry] : f.tensors)
      if (!all.emplace(name, Located{&f, &entry}).second)
        return make_error(fmt::format("{}: tensor {} is in two shards", dir, name));
  for (const auto& [name, file] : weight_map.items()) {
    auto found = all.find(name);
    if (found == all.end() || fs::path(found->second.file->path).filename() != file.get<std::string>())
      return make_error(fmt::format("{}: the index puts {} in {}, whose header lacks it", index_path, name,
                                    file.get<std::string>()));
  }
  return all;
}

}  // namespace

bool is_hf_folder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::exists(path + "/config.json", ec);
}

Result<ModelConfig> read_hf_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  auto read = read_json(path);
  if (!read) return read.error();
  const Json& c = *read;
  const std::string type = c.value("model_type", std::string());
  if (type != "llama")
    return make_error(
        fmt::format("{}: model_type = \"{}\": troupe loads Hugging Face's \"llama\" models", path, type));
  TROUPE_TRY(check_llama_features(c, path));
  ModelConfig m;
  m.type = "llama";
  auto take = [&](int64_t& field, const char* key, std::optional<int64_t> fallback = std::nullopt) -> Status {
    auto value = integer(c, path, key, fallback);
    if (!value) return value.error();
    field = *value;
    return {};
  };
  TROUPE_TRY(take(m.vocab_size, "vocab_size"));
  TROUPE_TRY(take(m.d_model, "hidden_size"));
  TROUPE_TRY(take(m.n_layers, "num_hidden_layers"));
  TROUPE_TRY(take(m.n_heads, "num_attention_heads"));
  TROUPE_TRY(take(m.n_kv_heads, "num_key_value_heads", m.n_heads));
  TROUPE_TRY(take(m.d_ff, "intermediate_size"));
  if (m.n_heads == 0 || m.d_model % m.n_heads != 0)
    return make_error(fmt::format("{}: hidden_size = {} is not divisible by num_attention_heads = {}", path,
                                  m.d_model, m.n_heads));
  int64_t head_dim = 0;
  TROUPE_TRY(take(head_dim, "head_dim", m.d_model / m.n_heads));
  if (head_dim != m.d_model / m.n_heads)
    return make_error(
        fmt::format("{}: head_dim = {}: troupe's heads are hidden_size / num_attention_heads = {} "
                    "wide",
                    path, head_dim, m.d_model / m.n_heads));
  const Json rope = c.contains("rope_parameters") ? c["rope_parameters"] : c;
  auto theta = number(rope, path, "rope_theta", 10000.0);
  auto eps = number(c, path, "rms_norm_eps", 1e-6);
  if (!theta) return theta.error();
  if (!eps) return eps.error();
  m.rope_theta = *theta;
  m.norm_eps = *eps;
  m.tie_embeddings = c.value("tie_word_embeddings", false);
  return m;
}

Status check_hf_config(const std::string& dir, const ModelConfig& model) {
  auto theirs = read_hf_config(dir);
  if (!theirs) return theirs.error();
  if (model.type != theirs->type)
    return make_error(fmt::format("{}/config.json is a \"{}\" model; [model] type = \"{}\"", dir,
                                  theirs->type, model.type));
  std::vector<std::string> differ;
  auto compare = [&](const char* key, const char* hf_key, auto mine, auto given) {
    if (mine != given)
      differ.push_back(fmt::format("[model] {} = {} where its {} = {}", key, mine, hf_key, given));
  };
  compare("vocab_size", "vocab_size", model.vocab_size, theirs->vocab_size);
  compare("d_model", "hidden_size", model.d_model, theirs->d_model);
  compare("n_layers", "num_hidden_layers", model.n_layers, theirs->n_layers);
  compare("n_heads", "num_attention_heads", model.n_heads, theirs->n_heads);
  compare("n_kv_heads", "num_key_value_heads", model.n_kv_heads, theirs->n_kv_heads);
  compare("d_ff", "intermediate_size", model.d_ff, theirs->d_ff);
  compare("rope_theta", "rope_theta", model.rope_theta, theirs->rope_theta);
  compare("norm_eps", "rms_norm_eps", model.norm_eps, theirs->norm_eps);
  compare("tie_embeddings", "tie_word_embeddings", model.tie_embeddings, theirs->tie_embeddings);
  if (differ.empty()) return {};
  return make_error(fmt::format("[model] init_from: {}/config.json describes another model: {}", dir,
                                fmt::join(differ, "; ")));
}

Status load_hf_folder(const std::string& dir, const ModelConfig& config, ModelParameters& model) {
  TROUPE_TRY(check_hf_config(dir, config));
  std::vector<SafetensorsFile> files;
  auto all = index_folder(dir, files);
  if (!all) return make_error("[model] init_from: " + all.error().message);
  std::vector<Located> sources;
  std::set<std::string> used;
  for (std::size_t t = 0; t < model.tensors.size(); ++t) {  // every check before any copy
    const std::string name = hf_name(model.names[t]);
    auto found = all->find(name);
    if (name.empty() || found == all->end())
      return make_error(fmt::format("[model] init_from: {} has no tensor {} (troupe's {})", dir,
                                    name.empty() ? "for it" : name, model.names[t]));
    if (found->second.entry->shape != model.tensors[t].sizes().vec())
      return make_error(fmt::format("[model] init_from: {} in {} has shape [{}]; the model's {} is [{}]",
                                    name, found->second.file->path,
                                    fmt::join(found->second.entry->shape, ", "), model.names[t],
                                    fmt::join(model.tensors[t].sizes(), ", ")));
    sources.push_back(found->second);
    used.insert(name);
  }
  for (const auto& [name, located] : *all)
    if (!used.count(name))
      return make_error(fmt::format("[model] init_from: {} holds {}, which the model does not have",
                                    located.file->path, name));
  torch::NoGradGuard no_grad;
  for (std::size_t t = 0; t < model.tensors.size(); ++t) {
    auto tensor = read_safetensors_tensor(*sources[t].file, hf_name(model.names[t]));
    if (!tensor) return make_error("[model] init_from: " + tensor.error().message);
    model.tensors[t].copy_(tensor->to(model.tensors[t].scalar_type()));
  }
  return {};
}

Status write_hf_folder(const std::string& dir, const ModelConfig& config,
                       const ConsolidatedParameters& parameters) {
  if (config.type != "llama")
    return make_error(fmt::format(
        "--format hf writes the \"llama\" family; this checkpoint's model is \"{}\"", config.type));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return make_error(fmt::format("cannot make {}: {}", dir, ec.message()));
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (std::size_t t = 0; t < parameters.tensors.size(); ++t) {
    const std::string name = hf_name(parameters.tensors[t].name);
    if (name.empty())
      return make_error(
          fmt::format("the checkpoint's {} has no Hugging Face name", parameters.tensors[t].name));
    const auto& values = parameters.values[t];
    tensors.emplace_back(name, torch::from_blob(const_cast<float*>(values.data()),
                                                {static_cast<int64_t>(values.size())}, torch::kFloat32)
                                   .view(parameters.tensors[t].shape));
  }
  TROUPE_TRY(write_safetensors(dir + "/" + kWeights, tensors));
  const Json hf = {{"architectures", {"LlamaForCausalLM"}},
                   {"model_type", "llama"},
                   {"vocab_size", config.vocab_size},
                   {"hidden_size", config.d_model},
                   {"intermediate_size", config.d_ff},
                   {"num_hidden_layers", config.n_layers},
                   {"num_attention_heads", config.n_heads},
                   {"num_key_value_heads", config.n_kv_heads},
                   {"head_dim", config.d_model / config.n_heads},
                   {"max_position_embeddings", config.seq_len},
                   {"rms_norm_eps", config.norm_eps},
                   {"rope_theta", config.rope_theta},
                   {"hidden_act", "silu"},
                   {"attention_bias", false},
                   {"mlp_bias", false},
                   {"tie_word_embeddings", config.tie_embeddings},
                   {"dtype", "float32"}};
  std::ofstream out(dir + "/config.json", std::ios::trunc);
  out << hf.dump(2) << "\n";
  out.close();
  if (!out) return make_error(fmt::format("cannot write {}/config.json", dir));
  return {};
}

}  // namespace troupe
