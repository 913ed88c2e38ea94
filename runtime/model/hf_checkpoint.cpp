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
#include "runtime/model/hf_config.hpp"
#include "runtime/model/hf_names.hpp"
#include "runtime/model/safetensors.hpp"

namespace troupe {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr const char* kIndex = "model.safetensors.index.json";
constexpr const char* kWeights = "model.safetensors";

struct Located {
  const SafetensorsFile* file;
  const SafetensorsEntry* entry;
  std::string stored_name;  ///< as the file names it
};

// The safetensors files of `dir`: model.safetensors, or the shards the index lists (whose
// every entry must be in the shard it names).
Result<std::vector<SafetensorsFile>> read_files(const std::string& dir) {
  const std::string index_path = dir + "/" + kIndex;
  std::vector<std::string> names{kWeights};
  Json weight_map = Json::object();
  if (fs::exists(index_path)) {
    std::ifstream in(index_path);
    const Json index = Json::parse(in, nullptr, /*allow_exceptions=*/false);
    weight_map = index.is_object() ? index.value("weight_map", Json()) : Json();
    if (!weight_map.is_object())
      return make_error(fmt::format("{}: no weight_map object of name -> file", index_path));
    std::set<std::string> shards;
    for (const auto& [name, file] : weight_map.items()) {
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos)
        return make_error(
            fmt::format("{}: {} maps to {}, not a file of the folder", index_path, name, file.dump()));
      shards.insert(file.get<std::string>());
    }
    names.clear();
    for (const std::string& shard : shards) names.push_back(shard);
  }
  std::vector<SafetensorsFile> files;
  for (const auto& name : names) {
    auto file = read_safetensors_header(dir + "/" + name);
    if (!file) return file.error();
    files.push_back(std::move(*file));
  }
  for (const auto& [name, shard] : weight_map.items()) {
    bool there = false;
    for (const SafetensorsFile& f : files)
      there = there || (fs::path(f.path).filename() == shard.get<std::string>() && f.tensors.count(name));
    if (!there)
      return make_error(fmt::format("{}: the index puts {} in {}, whose header lacks it", index_path, name,
                                    shard.get<std::string>()));
  }
  return files;
}

// Every parameter tensor of the folder, by its canonical Hugging Face name.
Result<std::map<std::string, Located>> index_tensors(const std::string& dir, const ModelConfig& config,
                                                     const std::vector<SafetensorsFile>& files) {
  std::map<std::string, Located> all;
  for (const SafetensorsFile& f : files)
    for (const auto& [name, entry] : f.tensors) {
      if (hf_buffer(config, name)) continue;
      if (!all.emplace(hf_canonical_name(config, name), Located{&f, &entry, name}).second)
        return make_error(fmt::format("{}: tensor {} is there twice", dir, name));
    }
  return all;
}

std::vector<int64_t> stored_shape(const HfName& name, std::vector<int64_t> shape) {
  if (name.transposed && shape.size() == 2) std::swap(shape[0], shape[1]);
  return shape;
}

}  // namespace

bool is_hf_folder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::exists(path + "/config.json", ec);
}

Status load_hf_folder(const std::string& dir, const ModelConfig& config, ModelParameters& model) {
  TROUPE_TRY(check_hf_config(dir, config));
  auto files = read_files(dir);
  if (!files) return make_error("[model] init_from: " + files.error().message);
  auto all = index_tensors(dir, config, *files);
  if (!all) return make_error("[model] init_from: " + all.error().message);
  std::vector<const Located*> sources;
  std::set<std::string> used;
  for (std::size_t t = 0; t < model.tensors.size(); ++t) {  // every check before any copy
    const HfName name = hf_name(config, model.names[t]);
    auto found = all->find(name.name);
    if (name.name.empty() || found == all->end())
      return make_error(fmt::format("[model] init_from: {} has no tensor {} (troupe's {})", dir,
                                    name.name.empty() ? "for it" : name.name, model.names[t]));
    const auto wanted = stored_shape(name, model.tensors[t].sizes().vec());
    if (found->second.entry->shape != wanted)
      return make_error(fmt::format("[model] init_from: {} in {} has shape [{}]; the model's {} needs [{}]",
                                    found->second.stored_name, found->second.file->path,
                                    fmt::join(found->second.entry->shape, ", "), model.names[t],
                                    fmt::join(wanted, ", ")));
    sources.push_back(&found->second);
    used.insert(name.name);
  }
  for (const auto& [name, located] : *all)
    if (!used.count(name))
      return make_error(fmt::format("[model] init_from: {} holds {}, which the model does not have",
                                    located.file->path, located.stored_name));
  torch::NoGradGuard no_grad;
  for (std::size_t t = 0; t < model.tensors.size(); ++t) {
    auto tensor = read_safetensors_tensor(*sources[t]->file, sources[t]->stored_name);
    if (!tensor) return make_error("[model] init_from: " + tensor.error().message);
    const torch::Tensor given = hf_name(config, model.names[t]).transposed ? tensor->t() : *tensor;
    model.tensors[t].copy_(given.to(model.tensors[t].scalar_type()));
  }
  return {};
}

Status write_hf_folder(const std::string& dir, const ModelConfig& config,
                       const ConsolidatedParameters& parameters) {
  auto text = hf_config_text(config);
  if (!text) return text.error();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return make_error(fmt::format("cannot make {}: {}", dir, ec.message()));
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (std::size_t t = 0; t < parameters.tensors.size(); ++t) {
    const HfName name = hf_name(config, parameters.tensors[t].name);
    if (name.name.empty())
      return make_error(
          fmt::format("the checkpoint's {} has no Hugging Face name", parameters.tensors[t].name));
    const auto& values = parameters.values[t];
    torch::Tensor tensor = torch::from_blob(const_cast<float*>(values.data()),
                                            {static_cast<int64_t>(values.size())}, torch::kFloat32)
                               .view(parameters.tensors[t].shape);
    tensors.emplace_back(name.name, name.transposed ? tensor.t().contiguous() : tensor);
  }
  TROUPE_TRY(write_safetensors(dir + "/" + kWeights, tensors));
  std::ofstream out(dir + "/config.json", std::ios::trunc);
  out << *text;
  out.close();
  if (!out) return make_error(fmt::format("cannot write {}/config.json", dir));
  return {};
}

}  // namespace troupe
