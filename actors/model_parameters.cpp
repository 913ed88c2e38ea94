#include "actors/model_parameters.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

namespace troupe {
namespace {

// The bytes of its storage a tensor can reach: [first, last).
struct Extent {
  const void* storage = nullptr;
  std::size_t first = 0, last = 0;
  std::size_t tensor = 0;
};

Extent extent_of(const torch::Tensor& t, std::size_t index) {
  Extent e;
  e.storage = t.storage().unsafeGetStorageImpl();
  auto item = static_cast<std::size_t>(t.element_size());
  std::size_t reach = 1;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) > 1) reach += static_cast<std::size_t>((t.size(d) - 1) * std::abs(t.stride(d)));
  e.first = static_cast<std::size_t>(t.storage_offset()) * item;
  e.last = t.numel() == 0 ? e.first : e.first + reach * item;
  e.tensor = index;
  return e;
}

// Two different tensors whose memory overlaps cannot be updated as two parameters.
Status check_disjoint(const ModelParameters& m) {
  std::vector<Extent> extents;
  for (std::size_t i = 0; i < m.tensors.size(); ++i)
    if (m.tensors[i].numel() > 0 && m.tensors[i].has_storage()) extents.push_back(extent_of(m.tensors[i], i));
  std::sort(extents.begin(), extents.end(), [](const Extent& a, const Extent& b) {
    return std::tie(a.storage, a.first) < std::tie(b.storage, b.first);
  });
  for (std::size_t k = 1; k < extents.size(); ++k) {
    const Extent &a = extents[k - 1], &b = extents[k];
    if (a.storage == b.storage && b.first < a.last)
      return make_error(fmt::format(
          "parameter '{}' overlaps the memory of parameter '{}' but is a different tensor (a view or "
          "alias of it), so an optimizer step would update that memory twice; to share a weight between "
          "layers, register the same tensor in each of them",
          m.names[std::max(a.tensor, b.tensor)], m.names[std::min(a.tensor, b.tensor)]));
  }
  return {};
}

Status check_trainable(const torch::Tensor& t, const std::string& name, const torch::Tensor& first,
                       const std::string& first_name) {
  if (t.scalar_type() != torch::kFloat32)
    return make_error(fmt::format("parameter '{}' is {}, but troupe trains fp32 (Float) parameters", name,
                                  c10::toString(t.scalar_type())));
  if (!t.requires_grad())
    return make_error(fmt::format(
        "parameter '{}' does not require a gradient (it is frozen), but troupe updates every parameter it "
        "is given: leave frozen tensors out of the layers' parameters (register them as buffers)",
        name));
  if (t.device() != first.device())
    return make_error(
        fmt::format("parameter '{}' is on {} but '{}' is on {}: every parameter must be on "
                    "one device",
                    name, t.device().str(), first_name, first.device().str()));
  return {};
}

}  // namespace

std::vector<std::vector<std::size_t>> ModelParameters::owned_counts() const {
  std::vector<std::vector<std::size_t>> counts;
  for (const auto& layer : owned) {
    counts.emplace_back();
    for (std::size_t i : layer) counts.back().push_back(static_cast<std::size_t>(tensors[i].numel()));
  }
  return counts;
}

int64_t ModelParameters::elements() const {
  int64_t n = 0;
  for (const auto& t : tensors) n += t.numel();
  return n;
}

std::vector<torch::Tensor> unique_parameters(const torch::nn::Module& module) {
  std::vector<torch::Tensor> unique;
  std::unordered_set<const void*> seen;  // by TensorImpl, as model_parameters() finds sharing
  for (const auto& parameter : module.parameters())
    if (seen.insert(parameter.unsafeGetTensorImpl()).second) unique.push_back(parameter);
  return unique;
}

Result<ModelParameters> model_parameters(const torch::nn::Sequential& model) {
  ModelParameters m;
  std::unordered_map<const void*, std::size_t> index_of;  // by TensorImpl
  for (const auto& child : model->named_children()) {
    auto& owned = m.owned.emplace_back();
    auto& borrowed = m.borrowed.emplace_back();
    for (const auto& item : child.value()->named_parameters(/*recurse=*/true)) {
      const torch::Tensor& t = item.value();
      std::string name = child.key() + "." + item.key();
      auto [at, added] = index_of.emplace(t.unsafeGetTensorImpl(), m.tensors.size());
      if (added) {
        TROUPE_TRY(check_trainable(t, name, m.tensors.empty() ? t : m.tensors.front(),
                                   m.names.empty() ? name : m.names.front()));
        m.tensors.push_back(t);
        m.names.push_back(std::move(name));
        owned.push_back(at->second);
        continue;
      }
      bool mine = std::find(owned.begin(), owned.end(), at->second) != owned.end();
      bool listed = std::find(borrowed.begin(), borrowed.end(), at->second) != borrowed.end();
      if (!mine && !listed) borrowed.push_back(at->second);
    }
  }
  TROUPE_TRY(check_disjoint(m));
  return m;
}

}  // namespace troupe
