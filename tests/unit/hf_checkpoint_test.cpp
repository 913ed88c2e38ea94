// safetensors files and Hugging Face folders (runtime/model/safetensors.hpp,
// hf_checkpoint.hpp) without Python: round trips, shards, and every kind of bad file
// refused before anything is copied, naming the file, the tensor or the offset.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "actors/model_parameters.hpp"
#include "runtime/model/family.hpp"
#include "runtime/model/hf_checkpoint.hpp"
#include "runtime/model/safetensors.hpp"
#include "tests/integration/command.hpp"

namespace troupe {
namespace {

using Named = std::vector<std::pair<std::string, torch::Tensor>>;

std::string temp_dir() {
  return testing::make_temp_dir();
}

template <class T>
std::string error_of(const Result<T>& r) {
  return r.ok() ? "<no error>" : r.error().message;
}

// A safetensors file whose header is `header` (written as given) over `data_bytes` zeros.
std::string raw_file(const std::string& header, std::size_t data_bytes) {
  const std::string path = temp_dir() + "/raw.safetensors";
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << std::string(data_bytes, '\0');
  return path;
}

TEST(Safetensors, WritesAndReadsTensorsInTheirDtypes) {
  const std::string path = temp_dir() + "/t.safetensors";
  const Named tensors = {{"a", torch::randn({3, 5})},
                         {"b", torch::randn({7}).to(torch::kBFloat16)},
                         {"c", torch::arange(4, torch::kInt64)}};
  ASSERT_TRUE(write_safetensors(path, tensors).ok());
  auto file = read_safetensors_header(path);
  ASSERT_TRUE(file.ok()) << file.error().message;
  EXPECT_EQ(file->metadata.at("format"), "pt");
  EXPECT_EQ(file->data_start % 8, 0u) << "the data is 8-byte aligned";
  for (const auto& [name, tensor] : tensors) {
    auto read = read_safetensors_tensor(*file, name);
    ASSERT_TRUE(read.ok()) << read.error().message;
    EXPECT_TRUE(torch::equal(*read, tensor)) << name;
  }
}

TEST(Safetensors, ATruncatedFileIsRefusedNamingTheTensorAndOffset) {
  const std::string path = temp_dir() + "/t.safetensors";
  ASSERT_TRUE(write_safetensors(path, {{"w", torch::randn({4, 4})}}).ok());
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);
  EXPECT_NE(error_of(read_safetensors_header(path))
                .find("tensor w ends at data offset 64, past the file's 54 bytes"),
            std::string::npos)
      << error_of(read_safetensors_header(path));
}

TEST(Safetensors, AHeaderThatLiesAboutOffsetsIsRefused) {
  // 2 × 2 fp32 is 16 bytes; the header claims 12.
  const std::string lies = raw_file(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", 12);
  EXPECT_NE(error_of(read_safetensors_header(lies))
                .find("tensor w (F32 [2,2]) needs 16 bytes; its data_offsets [0, "
                      "12] hold 12"),
            std::string::npos)
      << error_of(read_safetensors_header(lies));
  const std::string overlap = raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                       12);
  EXPECT_NE(error_of(read_safetensors_header(overlap)).find("it overlaps the tensor before"),
            std::string::npos)
      << error_of(read_safetensors_header(overlap));
  const std::string unknown = raw_file(R"({"a":{"dtype":"F8","shape":[2],"data_offsets":[0,2]}})", 2);
  EXPECT_NE(error_of(read_safetensors_header(unknown)).find("tensor a has the unknown dtype \"F8\""),
            std::string::npos);
  const std::string long_header = raw_file("{}", 0);
  std::fstream f(long_header, std::ios::in | std::ios::out | std::ios::binary);
  const uint64_t claim = 4096;
  f.write(reinterpret_cast<const char*>(&claim), 8);
  f.close();
  EXPECT_NE(
      error_of(read_safetensors_header(long_header)).find("its header claims 4096 bytes; the file has 2"),
      std::string::npos)
      << error_of(read_safetensors_header(long_header));
}

ModelConfig small_llama() {
  ModelConfig m;
  m.type = "llama";
  m.vocab_size = 320;
  m.seq_len = 16;
  m.d_model = 32;
  m.n_layers = 2;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.d_ff = 48;
  return m;
}

// A Hugging Face folder written from a freshly drawn `config` model (seed 5).
std::string folder_of(const ModelConfig& config) {
  torch::manual_seed(5);
  auto parameters = model_parameters(make_model(config));
  ConsolidatedParameters c;
  for (std::size_t t = 0; t < parameters->tensors.size(); ++t) {
    const torch::Tensor& p = parameters->tensors[t];
    c.tensors.push_back(ModelTensor{parameters->names[t], p.sizes().vec()});
    c.values.emplace_back(p.data_ptr<float>(), p.data_ptr<float>() + p.numel());
  }
  const std::string dir = temp_dir() + "/hf";
  EXPECT_TRUE(write_hf_folder(dir, config, c).ok());
  return dir;
}

// `config`'s model with the folder's weights, or the load's error.
Result<ModelParameters> load(const std::string& dir, const ModelConfig& config) {
  torch::manual_seed(9);
  auto parameters = model_parameters(make_model(config));
  if (!parameters) return parameters.error();
  TROUPE_TRY(load_hf_folder(dir, config, *parameters));
  return *parameters;
}

TEST(HfFolder, WhatTroupeWritesLoadsBackBitForBitAndDescribesItsModel) {
  for (bool tied : {false, true}) {
    ModelConfig config = small_llama();
    config.tie_embeddings = tied;
    const std::string dir = folder_of(config);
    EXPECT_TRUE(is_hf_folder(dir));
    auto described = read_hf_config(dir);
    ASSERT_TRUE(described.ok()) << described.error().message;
    EXPECT_EQ(described->n_kv_heads, 2);
    EXPECT_EQ(described->d_ff, 48);
    EXPECT_EQ(described->tie_embeddings, tied);
    auto loaded = load(dir, config);
    ASSERT_TRUE(loaded.ok()) << loaded.error().message;
    torch::manual_seed(5);
    auto drawn = model_parameters(make_model(config));
    for (std::size_t t = 0; t < drawn->tensors.size(); ++t)
      EXPECT_TRUE(torch::equal(loaded->tensors[t], drawn->tensors[t])) << drawn->names[t];
  }
}

// GPT-2's names, its Conv1D weights stored transposed, its tied head left out of the file.
TEST(HfFolder, AGptIsWrittenInGpt2sNamesAndLoadsBack) {
  ModelConfig config = small_llama();
  config.type = "gpt";
  config.n_kv_heads = 4;
  config.d_ff = 128;
  config.activation = "gelu_tanh";
  config.tie_embeddings = true;
  const std::string dir = folder_of(config);
  auto file = read_safetensors_header(dir + "/model.safetensors");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->tensors.at("transformer.h.0.attn.c_attn.weight").shape, (std::vector<int64_t>{32, 96}))
      << "Conv1D's [in, out]";
  EXPECT_EQ(file->tensors.count("lm_head.weight"), 0u) << "tied: the head is the embedding";
  auto described = read_hf_config(dir);
  ASSERT_TRUE(described.ok()) << described.error().message;
  EXPECT_EQ(described->activation, "gelu_tanh");
  EXPECT_EQ(described->seq_len, 16) << "n_positions: the learned position table's rows";
  auto loaded = load(dir, config);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  torch::manual_seed(5);
  auto drawn = model_parameters(make_model(config));
  for (std::size_t t = 0; t < drawn->tensors.size(); ++t)
    EXPECT_TRUE(torch::equal(loaded->tensors[t], drawn->tensors[t])) << drawn->names[t];
  ModelConfig erf = config;
  erf.activation = "gelu";
  EXPECT_EQ(error_of(load(dir, erf)),
            "[model] init_from: " + dir +
                "/config.json describes another model: [model] activation = \"gelu\" "
                "where its activation_function = \"gelu_new\"");
}

TEST(HfFolder, ShardsListedByTheIndexLoad) {
  const ModelConfig config = small_llama();
  const std::string dir = folder_of(config);
  auto whole = read_safetensors_header(dir + "/model.safetensors");
  Named first, second;
  std::string index = R"({"metadata":{},"weight_map":{)";
  bool comma = false;
  for (const auto& [name, entry] : whole->tensors) {
    const bool early = name.find("layers.1") == std::string::npos;
    (early ? first : second).emplace_back(name, *read_safetensors_tensor(*whole, name));
    index += (comma ? "," : "") + ("\"" + name + "\":\"model-0000") + (early ? "1" : "2") +
             "-of-00002.safetensors\"";
    comma = true;
  }
  index += "}}";
  std::filesystem::remove(dir + "/model.safetensors");
  ASSERT_TRUE(write_safetensors(dir + "/model-00001-of-00002.safetensors", first).ok());
  ASSERT_TRUE(write_safetensors(dir + "/model-00002-of-00002.safetensors", second).ok());
  std::ofstream(dir + "/model.safetensors.index.json") << index;
  auto loaded = load(dir, config);
  EXPECT_TRUE(loaded.ok()) << loaded.error().message;
}

TEST(HfFolder, AnotherModelsConfigIsRefusedNamingEachKey) {
  const std::string dir = folder_of(small_llama());
  ModelConfig other = small_llama();
  other.n_layers = 3;
  other.n_kv_heads = 4;
  EXPECT_EQ(error_of(load(dir, other)), "[model] init_from: " + dir +
                                            "/config.json describes another model: [model] n_layers = 3 "
                                            "where its num_hidden_layers = 2; [model] "
                                            "n_kv_heads = 4 where its num_key_value_heads = 2");
  ModelConfig gpt = small_llama();
  gpt.type = "gpt";
  EXPECT_EQ(error_of(load(dir, gpt)), dir + "/config.json is a \"llama\" model; [model] type = \"gpt\"");
}

// Rewrites the folder's weights through `edit` (name -> tensor), the config kept.
template <class Edit>
void rewrite_weights(const std::string& dir, Edit edit) {
  auto file = read_safetensors_header(dir + "/model.safetensors");
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& [name, entry] : file->tensors) tensors[name] = *read_safetensors_tensor(*file, name);
  edit(tensors);
  ASSERT_TRUE(write_safetensors(dir + "/model.safetensors", Named(tensors.begin(), tensors.end())).ok());
}

TEST(HfFolder, AMissingExtraOrMisshapenTensorIsRefusedBeforeAnyCopy) {
  const ModelConfig config = small_llama();
  const std::string misshapen = folder_of(config);
  rewrite_weights(misshapen, [](auto& t) {
    t["model.layers.1.self_attn.k_proj.weight"] = torch::zeros({32, 32});
  });
  EXPECT_EQ(error_of(load(misshapen, config)),
            "[model] init_from: model.layers.1.self_attn.k_proj.weight in " + misshapen +
                "/model.safetensors has shape [32, 32]; the model's block1.k.weight needs [16, 32]");
  const std::string missing = folder_of(config);
  rewrite_weights(missing, [](auto& t) { t.erase("model.norm.weight"); });
  EXPECT_EQ(error_of(load(missing, config)),
            "[model] init_from: " + missing + " has no tensor model.norm.weight (troupe's head.norm.weight)");
  const std::string extra = folder_of(config);
  rewrite_weights(extra, [](auto& t) { t["model.layers.0.self_attn.q_proj.bias"] = torch::zeros({32}); });
  EXPECT_EQ(error_of(load(extra, config)),
            "[model] init_from: " + extra +
                "/model.safetensors holds model.layers.0.self_attn.q_proj.bias, which "
                "the model does not have");
}

TEST(HfFolder, FeaturesTroupeDoesNotBuildAreRefusedByKey) {
  const std::string dir = folder_of(small_llama());
  std::ifstream in(dir + "/config.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto with = [&](const std::string& from, const std::string& to) {
    std::string changed = text;
    changed.replace(changed.find(from), from.size(), to);
    std::ofstream(dir + "/config.json") << changed;
    return error_of(read_hf_config(dir));
  };
  EXPECT_EQ(with("\"attention_bias\": false", "\"attention_bias\": true"),
            dir + "/config.json: attention_bias = true: troupe's LLaMA has no biases");
  EXPECT_EQ(with("\"model_type\": \"llama\"", "\"model_type\": \"qwen2\""),
            dir +
                "/config.json: model_type = \"qwen2\": troupe loads Hugging Face's \"llama\" and \"gpt2\" "
                "models");
  EXPECT_EQ(
      with("\"rope_theta\": 10000.0", "\"rope_scaling\": {\"rope_type\": \"llama3\"}, \"rope_theta\": 1.0"),
      dir +
          "/config.json: rope_type = \"llama3\": troupe's rotary embedding is the default one (no scaling)");
}

}  // namespace
}  // namespace troupe
