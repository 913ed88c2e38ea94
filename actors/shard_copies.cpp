#include "actors/shard_copies.hpp"

#include <torch/torch.h>

#include <spdlog/spdlog.h>

#include "base/check.hpp"

namespace troupe {

std::size_t shard_elements(const std::vector<torch::Tensor>& shards) {
  std::size_t total = 0;
  for (const auto& t : shards) total += t.defined() ? static_cast<std::size_t>(t.numel()) : 0;
  return total;
}

std::vector<std::shared_ptr<HostBuffer>> shard_arrays(const DeviceRank& device, std::size_t count,
                                                      std::size_t elements,
                                                      std::vector<std::shared_ptr<HostBuffer>> reuse) {
  const std::size_t bytes = std::max<std::size_t>(elements, 1) * sizeof(float);
  reuse.resize(count);
  for (auto& array : reuse) {
    if (array && array.use_count() == 1 && array->bytes() == bytes) continue;
    array = std::make_shared<HostBuffer>(bytes);
    if (!device.pin) continue;
    if (auto pinned = device.pin(array->data(), array->bytes()))
      array->hold_page_lock(std::move(*pinned));
    else  // pageable memory still copies correctly, only synchronously and slower
      spdlog::warn("a checkpoint's host array stays pageable: {}", pinned.error().message);
  }
  return reuse;
}

void copy_shards(Stream& copies, const Event& after, ShardCopy direction,
                 const std::vector<std::vector<torch::Tensor>>& tensors,
                 const std::vector<std::shared_ptr<HostBuffer>>& arrays, std::function<void()> done) {
  TROUPE_CHECK(tensors.size() == arrays.size(), "one host array per array of shards");
  copies.wait(after);
  const bool to_host = direction == ShardCopy::to_host;
  for (std::size_t a = 0; a < arrays.size(); ++a) {
    TROUPE_CHECK(arrays[a]->bytes() >= shard_elements(tensors[a]) * sizeof(float),
                 "the host array holds every shard");
    float* host = arrays[a]->as<float>();
    for (const torch::Tensor& shard : tensors[a]) {
      if (!shard.defined() || shard.numel() == 0) continue;
      float* device = shard.data_ptr<float>();
      const std::size_t bytes = static_cast<std::size_t>(shard.numel()) * sizeof(float);
      copies.copy(to_host ? static_cast<void*>(host) : device, to_host ? static_cast<void*>(device) : host,
                  bytes, to_host ? "checkpoint to host" : "checkpoint to device");
      host += shard.numel();
    }
  }
  copies.record().on_complete(std::move(done));
}

}  // namespace troupe
