#include "runtime/model/safetensors.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

namespace troupe {
namespace {

using Json = nlohmann::json;

// The format's own limit on a header (safetensors refuses larger ones).
constexpr uint64_t kHeaderMax = 100 << 20;

struct Dtype {
  const char* name;
  torch::ScalarType type;
};
constexpr Dtype kDtypes[] = {{"F64", torch::kFloat64},   {"F32", torch::kFloat32}, {"F16", torch::kFloat16},
                             {"BF16", torch::kBFloat16}, {"I64", torch::kInt64},   {"I32", torch::kInt32},
                             {"I16", torch::kInt16},     {"I8", torch::kInt8},     {"U8", torch::kUInt8},
                             {"BOOL", torch::kBool}};

const Dtype* find_dtype(const std::string& name) {
  for (const Dtype& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}
const Dtype* find_dtype(torch::ScalarType type) {
  for (const Dtype& d : kDtypes)
    if (type == d.type) return &d;
  return nullptr;
}

Error bad(const std::string& path, const std::string& what) {
  return make_error(fmt::format("{}: not a valid safetensors file: {}", path, what));
}

// One header entry, every field checked; `data_bytes` is what follows the header.
Result<SafetensorsEntry> parse_entry(const std::string& path, const std::string& name, const Json& value,
                                     uint64_t data_bytes) {
  if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") ||
      !value.contains("data_offsets"))
    return bad(path, fmt::format("tensor {} lacks dtype, shape or data_offsets", name));
  SafetensorsEntry e;
  const Json& dtype = value["dtype"];
  const Dtype* known = dtype.is_string() ? find_dtype(dtype.get<std::string>()) : nullptr;
  if (known == nullptr)
    return bad(path, fmt::format("tensor {} has the unknown dtype {}", name, dtype.dump()));
  e.dtype = known->name;
  uint64_t elements = 1;
  if (!value["shape"].is_array()) return bad(path, fmt::format("tensor {}'s shape is not an array", name));
  for (const Json& dim : value["shape"]) {
    if (!dim.is_number_unsigned() || __builtin_mul_overflow(elements, dim.get<uint64_t>(), &elements))
      return bad(path, fmt::format("tensor {} has the shape {}", name, value["shape"].dump()));
    e.shape.push_back(dim.get<int64_t>());
  }
  const Json& offsets = value["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    return bad(path,
               fmt::format("tensor {}'s data_offsets {} are not two byte offsets", name, offsets.dump()));
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  const uint64_t element_bytes = c10::elementSize(known->type);
  uint64_t bytes = 0;
  if (e.end < e.begin || __builtin_mul_overflow(elements, element_bytes, &bytes) || e.end - e.begin != bytes)
    return bad(path, fmt::format("tensor {} ({} {}) needs {} bytes; its data_offsets [{}, {}] hold {}", name,
                                 e.dtype, value["shape"].dump(), elements * element_bytes, e.begin, e.end,
                                 e.end >= e.begin ? e.end - e.begin : 0));
  if (e.end > data_bytes)
    return bad(path,
               fmt::format("tensor {} ends at data offset {}, past the file's {} bytes of data (truncated?)",
                           name, e.end, data_bytes));
  return e;
}

// The format leaves no byte unaccounted for: sorted by offset, each tensor starts where the
// last ended, and the last ends at the end of the file.
Status check_coverage(const SafetensorsFile& file, uint64_t data_bytes) {
  std::vector<std::pair<const std::string*, const SafetensorsEntry*>> order;
  for (const auto& [name, e] : file.tensors) order.emplace_back(&name, &e);
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.second->begin < b.second->begin; });
  uint64_t at = 0;
  for (const auto& [name, e] : order) {
    if (e->begin != at)
      return bad(file.path,
                 fmt::format("tensor {} starts at data offset {}, where {} was expected ({})", *name,
                             e->begin, at, e->begin < at ? "it overlaps the tensor before" : "a gap"));
    at = e->end;
  }
  if (at != data_bytes)
    return bad(file.path, fmt::format("its tensors end at data offset {} but the file holds {} bytes of data",
                                      at, data_bytes));
  return {};
}

}  // namespace

Result<SafetensorsFile> read_safetensors_header(const std::string& path) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) return make_error(fmt::format("{}: cannot read: {}", path, ec.message()));
  std::ifstream in(path, std::ios::binary);
  unsigned char length_bytes[8];
  if (size < 8 || !in.read(reinterpret_cast<char*>(length_bytes), 8))
    return bad(path, fmt::format("{} bytes, shorter than the 8-byte header length", size));
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | length_bytes[i];
  if (length > kHeaderMax || length > size - 8)
    return bad(path,
               fmt::format("its header claims {} bytes; the file has {} after the length", length, size - 8));
  std::string text(length, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(length)))
    return bad(path, "the header cannot be read");
  const Json header = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!header.is_object()) return bad(path, "its header is not a JSON object");
  SafetensorsFile file{path, 8 + length, {}, {}};
  const uint64_t data_bytes = size - file.data_start;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (value.is_object())
        for (const auto& [key, text_value] : value.items())
          if (text_value.is_string()) file.metadata[key] = text_value.get<std::string>();
      continue;
    }
    auto entry = parse_entry(path, name, value, data_bytes);
    if (!entry) return entry.error();
    file.tensors.emplace(name, std::move(*entry));
  }
  TROUPE_TRY(check_coverage(file, data_bytes));
  return file;
}

Result<torch::Tensor> read_safetensors_tensor(const SafetensorsFile& file, const std::string& name) {
  auto found = file.tensors.find(name);
  if (found == file.tensors.end()) return make_error(fmt::format("{} holds no tensor {}", file.path, name));
  const SafetensorsEntry& e = found->second;
  torch::Tensor tensor = torch::empty(e.shape, torch::TensorOptions().dtype(find_dtype(e.dtype)->type));
  std::ifstream in(file.path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(file.data_start + e.begin));
  if (!in.read(static_cast<char*>(tensor.data_ptr()), static_cast<std::streamsize>(e.end - e.begin)))
    return make_error(fmt::format("{}: cannot read tensor {} at data offset {}", file.path, name, e.begin));
  return tensor;
}

Status write_safetensors(const std::string& path,
                         const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t at = 0;
  std::vector<torch::Tensor> data;
  for (const auto& [name, tensor] : tensors) {
    const Dtype* dtype = find_dtype(tensor.scalar_type());
    if (dtype == nullptr)
      return make_error(fmt::format("{}: tensor {} has a dtype safetensors lacks", path, name));
    data.push_back(tensor.detach().to(torch::kCPU).contiguous());
    const uint64_t bytes = data.back().numel() * data.back().element_size();
    header[name] = {
        {"dtype", dtype->name}, {"shape", tensor.sizes().vec()}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data 8-byte aligned, as Hugging Face's writer pads
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  unsigned char length_bytes[8];
  for (int i = 0; i < 8; ++i) length_bytes[i] = static_cast<unsigned char>(text.size() >> (8 * i));
  out.write(reinterpret_cast<const char*>(length_bytes), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const torch::Tensor& t : data)
    out.write(static_cast<const char*>(t.data_ptr()),
              static_cast<std::streamsize>(t.numel() * t.element_size()));
  out.close();
  if (!out) return make_error(fmt::format("cannot write {}", path));
  return {};
}

}  // namespace troupe
