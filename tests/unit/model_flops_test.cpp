// The GPT's FLOPs per layer against the closed forms they must add up to: forward and
// backward together are 6·N·tokens for the N parameters in matrix products, plus the
// attention's 12·L·s·d per token (Megatron's MFU accounting).
#include <gtest/gtest.h>

#include "runtime/config/resolve.hpp"
#include "runtime/model/model_flops.hpp"
#include "runtime/model/model_shape.hpp"

namespace troupe {
namespace {

ModelConfig model_of(int64_t d, int64_t layers, int64_t heads, int64_t seq, bool tied) {
  JobConfig job;
  job.batch.micro_batch_size = 1;
  job.model.d_model = d;
  job.model.n_layers = layers;
  job.model.n_heads = heads;
  job.model.seq_len = seq;
  job.model.tie_embeddings = tied;
  auto resolved = resolve_config(job);
  EXPECT_TRUE(resolved.ok()) << resolved.error().message;
  return resolved->model;
}

TEST(GptFlops, ForwardAndBackwardAreSixNTokensPlusTheAttention) {
  for (bool tied : {false, true}) {
    const ModelConfig m = model_of(64, 3, 4, 32, tied);
    const int64_t batch = 5, tokens = batch * m.seq_len;
    auto layers = model_layer_flops(m, batch, m.seq_len);
    ASSERT_EQ(layers.size(), 5u);
    double total = 0;
    int64_t parameters = 0;
    for (const auto& l : layers) {
      EXPECT_EQ(l.backward, 2 * l.forward) << l.name;
      total += l.forward + l.backward;
      parameters += l.parameters;
    }
    EXPECT_EQ(parameters, model_shape(m).parameters);
    const double d = 64, ff = 256, vocab = 256, L = 3;
    const double in_products = L * (4 * d * d + 2 * d * ff) + d * vocab;
    EXPECT_DOUBLE_EQ(total, 6 * in_products * tokens + 12 * L * m.seq_len * d * tokens);
    EXPECT_EQ(layers.front().forward, 0) << "the embedding only looks rows up";
    EXPECT_DOUBLE_EQ(layers.back().forward, 2 * tokens * d * vocab);
  }
}

TEST(GptFlops, ATensorParallelRankDoesItsShareOfEveryProduct) {
  const ModelConfig m = model_of(64, 2, 4, 32, false);
  auto whole = model_layer_flops(m, 2, m.seq_len);
  auto half = model_layer_flops(m, 2, m.seq_len, 2);
  for (std::size_t i = 0; i < whole.size(); ++i) EXPECT_DOUBLE_EQ(half[i].forward, whole[i].forward / 2) << i;
  // A block's shard at d 64, MLP 256, tp 2: both LayerNorms (2 × 128), q/k/v's rows (96 × 64
  // + 96), the projection's columns (64 × 32) and its whole bias (64), the MLP's halves
  // (128 × 64 + 128, 64 × 128) and its output bias (64).
  EXPECT_EQ(half[1].parameters, 256 + 6144 + 96 + 2048 + 64 + 8192 + 128 + 8192 + 64);
}

}  // namespace
}  // namespace troupe
