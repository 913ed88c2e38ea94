#include "runtime/model/attention.hpp"

#include <cmath>
#include <limits>

#include <torch/torch.h>

namespace troupe {
namespace {

void check_shapes(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "attention expects [B,H,T,D] tensors, got ",
              q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  TORCH_CHECK(k.sizes() == v.sizes(), "attention's keys ", k.sizes(), " and values ", v.sizes(), " differ");
  TORCH_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "attention's ", q.size(1),
              " query heads are not a multiple of its ", k.size(1), " key/value heads");
}

}  // namespace

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  check_shapes(q, k, v);
  const bool grouped = q.size(1) != k.size(1);
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true,
                                          /*scale=*/std::nullopt, /*enable_gqa=*/grouped);
}

torch::Tensor causal_attention_explicit(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v) {
  check_shapes(q, k, v);
  const int64_t group = q.size(1) / k.size(1);
  const auto keys = k.repeat_interleave(group, 1);
  const auto values = v.repeat_interleave(group, 1);
  const int64_t length = q.size(2);
  auto scores = torch::matmul(q, keys.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(3)));
  const auto future = torch::ones({length, length}, q.options().dtype(torch::kBool)).triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
  return torch::matmul(torch::softmax(scores, -1), values);
}

}  // namespace troupe
