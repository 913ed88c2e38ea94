#include "actors/zero/sequence_check.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include <fmt/format.h>

namespace troupe {
namespace {

constexpr std::size_t kRecord = 4;  // step, micro-batch, length, digest
constexpr uint64_t kDigestId = 0, kSequenceId = 1;

int64_t digest(const std::vector<int64_t>& layers) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the layer indices
  for (int64_t layer : layers) {
    h ^= static_cast<uint64_t>(layer);
    h *= 1099511628211ull;
  }
  return static_cast<int64_t>(h);
}

}  // namespace

LayerSequenceCheck::LayerSequenceCheck(int64_t dp, int64_t rank, std::vector<std::string> layer_names,
                                       Gather gather, double timeout_s, Tracer* tracer)
    : dp_(dp),
      rank_(rank),
      names_(std::move(layer_names)),
      gather_(std::move(gather)),
      timeout_s_(timeout_s),
      tracer_(tracer) {}

void LayerSequenceCheck::exchange(uint64_t id, const std::shared_ptr<HostBuffer>& buffer,
                                  std::size_t int64s_per_rank) {
  {
    std::lock_guard lock(mutex_);
    arrived_[id] = false;
  }
  std::size_t floats = int64s_per_rank * sizeof(int64_t) / sizeof(float);  // moved as raw bytes
  gather_(id, float_span(buffer, floats * static_cast<std::size_t>(rank_), floats),
          float_span(buffer, 0, floats * static_cast<std::size_t>(dp_)));
  Tracer::Scope waiting(tracer_, "compute wait", "layer sequence");
  std::unique_lock lock(mutex_);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
  while (!arrived_[id] && error_.empty())
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout)
      throw std::runtime_error(fmt::format("comparing layer sequences took longer than {} s", timeout_s_));
  if (!error_.empty()) throw std::runtime_error(error_);
}

void LayerSequenceCheck::agree(int64_t step, int64_t micro, const std::vector<int64_t>& layers) {
  if (dp_ == 1) return;
  auto records = std::make_shared<HostBuffer>(kRecord * sizeof(int64_t) * static_cast<std::size_t>(dp_));
  int64_t* mine = records->as<int64_t>() + rank_ * static_cast<int64_t>(kRecord);
  mine[0] = step;
  mine[1] = micro;
  mine[2] = static_cast<int64_t>(layers.size());
  mine[3] = digest(layers);
  exchange(kDigestId, records, kRecord);
  bool same = true;
  for (int64_t r = 0; r < dp_; ++r)
    for (std::size_t k = 0; k < kRecord; ++k) same &= records->as<int64_t>()[r * kRecord + k] == mine[k];
  if (same) return;
  // Every rank saw the same difference: all of them exchange the sequences and stop.
  // Length, then the layers; as wide as the longest sequence (a schedule may repeat layers).
  int64_t longest = 0;
  for (int64_t r = 0; r < dp_; ++r) longest = std::max(longest, records->as<int64_t>()[r * kRecord + 2]);
  auto width = static_cast<std::size_t>(longest) + 1;
  auto sequences = std::make_shared<HostBuffer>(width * sizeof(int64_t) * static_cast<std::size_t>(dp_));
  int64_t* own = sequences->as<int64_t>() + rank_ * static_cast<int64_t>(width);
  own[0] = static_cast<int64_t>(layers.size());
  for (std::size_t i = 0; i < layers.size(); ++i) own[i + 1] = layers[i];
  exchange(kSequenceId, sequences, width);
  throw std::runtime_error(describe(step, micro, sequences, width));
}

std::string LayerSequenceCheck::layer_name(int64_t layer) const {
  if (layer >= 0 && static_cast<std::size_t>(layer) < names_.size())
    return fmt::format("layer {} ({})", layer, names_[static_cast<std::size_t>(layer)]);
  return fmt::format("layer {}", layer);
}

std::string LayerSequenceCheck::describe(int64_t step, int64_t micro,
                                         const std::shared_ptr<HostBuffer>& sequences,
                                         std::size_t width) const {
  const int64_t* all = sequences->as<int64_t>();
  const int64_t* first = all;
  std::string where = fmt::format("step {}, micro-batch {}", step + 1, micro);
  std::string rule =
      "with ZeRO stage 3 every rank gathers each layer's parameters together, so every rank must run the "
      "same "
      "layers in the same order";
  for (int64_t r = 1; r < dp_; ++r) {
    const int64_t* other = all + r * static_cast<int64_t>(width);
    std::size_t common = static_cast<std::size_t>(std::min(first[0], other[0]));
    for (std::size_t i = 0; i < common; ++i)
      if (first[i + 1] != other[i + 1])
        return fmt::format("{}: rank {} runs {} where rank 0 runs {}, at position {} of the forward pass; {}",
                           where, r, layer_name(other[i + 1]), layer_name(first[i + 1]), i, rule);
    if (first[0] != other[0])
      return fmt::format("{}: rank {} runs {} layers where rank 0 runs {} (the first {} agree); {}", where, r,
                         other[0], first[0], common, rule);
  }
  return fmt::format("{}: the ranks are at different steps or micro-batches; {}", where, rule);
}

void LayerSequenceCheck::on_gathered(uint64_t id, const std::string& error) {
  {
    std::lock_guard lock(mutex_);
    if (!error.empty() && error_.empty()) error_ = "comparing layer sequences failed: " + error;
    if (id < arrived_.size()) arrived_[id] = true;
  }
  changed_.notify_all();
}

void LayerSequenceCheck::fail(const std::string& error) {
  {
    std::lock_guard lock(mutex_);
    if (error_.empty()) error_ = error;
  }
  changed_.notify_all();
}

}  // namespace troupe
