#include "runtime/parameter_file.hpp"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/torch.h>

#include <fstream>
#include <iterator>
#include <set>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "actors/model_parameters.hpp"
#include "runtime/model/hf_checkpoint.hpp"

namespace troupe {
namespace {

// torch.save's archive of `value`, as torch::pickle_save writes it but without the type
// tags it adds to a dict (torch.jit._pickle.restore_type_tag), which torch.load refuses
// since PyTorch 2.6 made weights_only its default: a plain dict of tensors loads there.
std::vector<char> torch_save_archive(const c10::IValue& value) {
  std::vector<char> pickled;
  torch::jit::Pickler pickler(
      [&](const char* bytes, size_t size) { pickled.insert(pickled.end(), bytes, bytes + size); },
      /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
      /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  std::vector<char> archive;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* bytes, size_t size) {
    archive.insert(archive.end(), static_cast<const char*>(bytes), static_cast<const char*>(bytes) + size);
    return size;
  });
  torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
  return archive;
}

}  // namespace

Status write_parameter_file(const std::string& path, const ConsolidatedParameters& parameters) {
  c10::Dict<std::string, at::Tensor> dict;
  for (std::size_t t = 0; t < parameters.tensors.size(); ++t) {
    const auto& values = parameters.values[t];
    torch::Tensor tensor = torch::from_blob(const_cast<float*>(values.data()),
                                            {static_cast<int64_t>(values.size())}, torch::kFloat32)
                               .clone()
                               .view(parameters.tensors[t].shape);
    dict.insert(parameters.tensors[t].name, tensor);
  }
  std::vector<char> bytes = torch_save_archive(c10::IValue(dict));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return make_error(fmt::format("cannot write the parameters to {}", path));
  return {};
}

Status load_parameter_file(const std::string& path, ModelParameters& model) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(fmt::format("[model] init_from: cannot read {}", path));
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  c10::IValue value;
  try {
    value = torch::pickle_load(bytes);
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    return make_error(fmt::format("[model] init_from: {} is not a parameter file: {}", path,
                                  what.substr(0, what.find('\n'))));
  }
  if (!value.isGenericDict())
    return make_error(fmt::format("[model] init_from: {} holds no dict of name → tensor", path));
  auto dict = value.toGenericDict();
  std::set<std::string> used;
  torch::NoGradGuard no_grad;
  for (std::size_t t = 0; t < model.tensors.size(); ++t) {
    const std::string& name = model.names[t];
    auto found = dict.find(name);
    if (found == dict.end() || !found->value().isTensor())
      return make_error(fmt::format("[model] init_from: {} has no tensor {}", path, name));
    at::Tensor given = found->value().toTensor();
    if (given.sizes() != model.tensors[t].sizes())
      return make_error(fmt::format("[model] init_from: {} in {} has shape [{}]; the model's is [{}]", name,
                                    path, fmt::join(given.sizes(), ", "),
                                    fmt::join(model.tensors[t].sizes(), ", ")));
    model.tensors[t].copy_(given.to(torch::kFloat32));
    used.insert(name);
  }
  for (const auto& entry : dict)
    if (entry.key().isString() && !used.count(entry.key().toStringRef()))
      return make_error(fmt::format("[model] init_from: {} holds {}, which the model does not have", path,
                                    entry.key().toStringRef()));
  return {};
}

Status load_initial_parameters(const ModelConfig& config, ModelParameters& model) {
  if (is_hf_folder(config.init_from)) return load_hf_folder(config.init_from, config, model);
  return load_parameter_file(config.init_from, model);
}

}  // namespace troupe
