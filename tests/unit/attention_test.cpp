// causal_attention (LibTorch 2's fused scaled_dot_product_attention) against its definition
// written out (matrix products, causal mask, softmax): outputs and the gradients of q, k and
// v, for multi-head and grouped-query attention, and position t never reading t + 1.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <vector>

#include "runtime/model/attention.hpp"

namespace troupe {
namespace {

struct Heads {
  int64_t query;
  int64_t key_value;
};

// Output and the gradients of q, k, v under a fixed upstream gradient, through `attend`.
template <typename Attend>
std::vector<torch::Tensor> outputs_and_gradients(Attend attend, const std::vector<torch::Tensor>& qkv,
                                                 const torch::Tensor& upstream) {
  std::vector<torch::Tensor> leaves;
  for (const auto& t : qkv) leaves.push_back(t.clone().requires_grad_(true));
  auto y = attend(leaves[0], leaves[1], leaves[2]);
  (y * upstream).sum().backward();
  return {y.detach(), leaves[0].grad(), leaves[1].grad(), leaves[2].grad()};
}

class CausalAttention : public ::testing::TestWithParam<Heads> {};

TEST_P(CausalAttention, FusedKernelEqualsTheWrittenOutDefinition) {
  torch::manual_seed(11);
  const auto [heads, kv_heads] = GetParam();
  const int64_t batch = 3, length = 37, width = 16;
  std::vector<torch::Tensor> qkv = {torch::randn({batch, heads, length, width}),
                                    torch::randn({batch, kv_heads, length, width}),
                                    torch::randn({batch, kv_heads, length, width})};
  const auto upstream = torch::randn({batch, heads, length, width});
  const auto fused = outputs_and_gradients(causal_attention, qkv, upstream);
  const auto explicit_ = outputs_and_gradients(causal_attention_explicit, qkv, upstream);
  const char* names[] = {"output", "dq", "dk", "dv"};
  for (size_t i = 0; i < fused.size(); ++i) {
    SCOPED_TRACE(names[i]);
    ASSERT_EQ(fused[i].sizes(), explicit_[i].sizes());
    EXPECT_LT((fused[i] - explicit_[i]).abs().max().item<double>(), 1e-5);
  }
}

TEST_P(CausalAttention, APositionNeverReadsALaterOne) {
  torch::manual_seed(12);
  const auto [heads, kv_heads] = GetParam();
  auto q = torch::randn({2, heads, 9, 8});
  auto k = torch::randn({2, kv_heads, 9, 8});
  auto v = torch::randn({2, kv_heads, 9, 8});
  const auto before = causal_attention(q, k, v);
  using torch::indexing::Slice;
  k.index_put_({Slice(), Slice(), Slice(5)}, torch::randn({2, kv_heads, 4, 8}));
  v.index_put_({Slice(), Slice(), Slice(5)}, torch::randn({2, kv_heads, 4, 8}));
  const auto after = causal_attention(q, k, v);
  const auto early = Slice(0, 5);
  EXPECT_TRUE(torch::equal(before.index({Slice(), Slice(), early}), after.index({Slice(), Slice(), early})));
  EXPECT_FALSE(
      torch::allclose(before.index({Slice(), Slice(), Slice(5)}), after.index({Slice(), Slice(), Slice(5)})));
}

INSTANTIATE_TEST_SUITE_P(Heads, CausalAttention, ::testing::Values(Heads{4, 4}, Heads{4, 2}, Heads{6, 1}),
                         [](const auto& info) {
                           return "h" + std::to_string(info.param.query) + "kv" +
                                  std::to_string(info.param.key_value);
                         });

TEST(CausalAttentionBf16, WithinBf16RoundingOfFp32) {
  torch::manual_seed(13);
  auto q = torch::randn({2, 4, 33, 16});
  auto k = torch::randn({2, 2, 33, 16});
  auto v = torch::randn({2, 2, 33, 16});
  const auto fp32 = causal_attention(q, k, v);
  const auto bf16 = causal_attention(q.to(torch::kBFloat16), k.to(torch::kBFloat16), v.to(torch::kBFloat16));
  EXPECT_EQ(bf16.scalar_type(), torch::kBFloat16);
  EXPECT_LT((bf16.to(torch::kFloat) - fp32).abs().max().item<double>(), 3e-2);
}

TEST(CausalAttentionInput, HeadsThatDoNotGroupAreRefused) {
  auto q = torch::randn({1, 4, 5, 8});
  auto kv = torch::randn({1, 3, 5, 8});
  try {
    causal_attention(q, kv, kv);
    FAIL() << "4 query heads over 3 key/value heads was accepted";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what_without_backtrace()).find("not a multiple of its 3 key/value heads"),
              std::string::npos)
        << error.what_without_backtrace();
  }
}

}  // namespace
}  // namespace troupe
