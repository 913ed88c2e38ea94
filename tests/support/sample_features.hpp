// The inputs of the small regression trainers the integration tests launch: sample i's
// features are uniform in [-1, 1], drawn from a generator seeded with i + 1, so every
// rank (and a single-process reference) makes any sample alike.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace troupe::testing {

/// Samples [first, first + count) as a [count, features] tensor.
inline torch::Tensor sample_features(int64_t first, int64_t count, int64_t features) {
  std::vector<torch::Tensor> xs;
  for (int64_t i = first; i < first + count; ++i) {
    auto g = at::detail::createCPUGenerator(static_cast<uint64_t>(i) + 1);
    xs.push_back(torch::rand({features}, g) * 2 - 1);
  }
  return torch::stack(xs);
}

}  // namespace troupe::testing
