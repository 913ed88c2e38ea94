// Specifications of the built-in LLaMA family (runtime/model/llama.hpp): its layers and
// parameters as model_shape() predicts them, causality, the rotary embedding's relative
// positions, RMSNorm's definition, grouped-query attention's key/value heads, and 16-bit
// runs. CPU only, single process.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "actors/model_parameters.hpp"
#include "runtime/model/family.hpp"
#include "runtime/model/gpt.hpp"
#include "runtime/model/llama.hpp"
#include "runtime/model/model_shape.hpp"

namespace troupe {
namespace {

ModelConfig tiny_llama() {
  ModelConfig model;
  model.type = "llama";
  model.vocab_size = 320;
  model.seq_len = 32;
  model.d_model = 32;
  model.n_layers = 2;
  model.n_heads = 4;
  model.n_kv_heads = 2;
  model.d_ff = 48;
  return model;
}

TEST(Llama, ShapeAloneGivesEveryLayersParametersAsMakeModelRegistersThem) {
  for (bool tied : {false, true}) {
    ModelConfig model = tiny_llama();
    model.tie_embeddings = tied;
    auto parameters = model_parameters(make_model(model));
    ASSERT_TRUE(parameters.ok());
    const ModelShape shape = model_shape(model);
    EXPECT_EQ(shape.layers, parameters->owned_counts()) << "tied " << tied;
    EXPECT_EQ(shape.borrowed, parameters->borrowed) << "tied " << tied;
    EXPECT_EQ(shape.parameters, parameters->elements()) << "tied " << tied;
  }
}

TEST(Llama, ABlockHasNoBiasAndNarrowKeyValueProjections) {
  const ModelConfig model = tiny_llama();
  auto layers = make_model(model);
  std::vector<std::string> names;
  for (const auto& p : layers->named_parameters()) names.push_back(p.key());
  const std::vector<std::string> expected = {"embedding.token.weight", "block0.norm_attention.weight",
                                             "block0.q.weight",        "block0.k.weight",
                                             "block0.v.weight",        "block0.o.weight",
                                             "block0.norm_mlp.weight", "block0.gate.weight",
                                             "block0.up.weight",       "block0.down.weight"};
  ASSERT_GE(names.size(), expected.size());
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + 10), expected);
  EXPECT_EQ(names.back(), "head.lm_head.weight");
  const auto named = layers->named_parameters();
  EXPECT_EQ(named["block0.k.weight"].sizes(), (std::vector<int64_t>{16, 32})) << "2 heads of width 8";
  EXPECT_EQ(named["block0.q.weight"].sizes(), (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(named["block0.gate.weight"].sizes(), (std::vector<int64_t>{48, 32}));
}

TEST(Llama, ChangingAFutureTokenLeavesEarlierLogitsUnchanged) {
  torch::manual_seed(3);
  auto llama = make_model(tiny_llama());
  auto tokens = torch::randint(0, 320, {2, 32}, torch::kLong);
  auto before = llama->forward(tokens);
  auto changed = tokens.clone();
  changed.index_put_({torch::indexing::Slice(), 20},
                     (tokens.index({torch::indexing::Slice(), 20}) + 1) % 320);
  auto after = llama->forward(changed);
  using torch::indexing::Slice;
  EXPECT_TRUE(torch::equal(before.index({Slice(), Slice(0, 20)}), after.index({Slice(), Slice(0, 20)})));
  EXPECT_FALSE(torch::allclose(before.index({Slice(), Slice(20)}), after.index({Slice(), Slice(20)})));
}

// What makes rotary embeddings positional: the score of a query at position m and a key
// at n depends on m - n alone.
TEST(Rotary, ScoresDependOnlyOnTheDistanceBetweenPositions) {
  torch::manual_seed(5);
  const int64_t width = 16;
  auto [cos, sin] = rotary_tables(40, width, 10000.0, torch::TensorOptions());
  auto q = torch::randn({1, 1, 1, width}).expand({1, 1, 40, width});
  auto k = torch::randn({1, 1, 1, width}).expand({1, 1, 40, width});
  const auto rq = apply_rotary(q, cos, sin)[0][0];  // [40, D]: the same vector at every position
  const auto rk = apply_rotary(k, cos, sin)[0][0];
  auto score = [&](int64_t m, int64_t n) { return rq[m].dot(rk[n]).item<double>(); };
  for (auto [m, n, shift] : {std::tuple{5, 2, 30}, std::tuple{9, 9, 17}, std::tuple{3, 11, 25}})
    EXPECT_NEAR(score(m, n), score(m + shift, n + shift), 1e-4) << m << ", " << n;
  EXPECT_GT(std::abs(score(5, 2) - score(5, 3)), 1e-3) << "a different distance scores differently";
  EXPECT_TRUE(torch::allclose(rq[0], q[0][0][0])) << "position 0 is not rotated";
  EXPECT_NEAR(rq[7].norm().item<double>(), q[0][0][0].norm().item<double>(), 1e-5)
      << "a rotation keeps lengths";
}

TEST(RmsNorm, IsXOverItsRootMeanSquareTimesTheWeight) {
  torch::manual_seed(6);
  RmsNorm norm(8, 1e-5);
  {
    torch::NoGradGuard no_grad;
    norm->weight.uniform_(0.5, 1.5);
  }
  auto x = torch::randn({3, 5, 8});
  auto expected = x / torch::sqrt(x.pow(2).mean(-1, true) + 1e-5) * norm->weight;
  EXPECT_TRUE(torch::allclose(norm(x), expected, 1e-6, 1e-6));
}

// One key/value head shared by every query head equals full multi-head attention whose
// key and value projections repeat that head.
TEST(Llama, OneKeyValueHeadIsMultiHeadAttentionWithRepeatedKeysAndValues) {
  ModelConfig grouped = tiny_llama();
  grouped.n_kv_heads = 1;
  ModelConfig full = tiny_llama();
  full.n_kv_heads = 4;
  torch::manual_seed(8);
  auto a = make_model(grouped);
  torch::manual_seed(8);
  auto b = make_model(full);
  {
    torch::NoGradGuard no_grad;
    auto pa = a->named_parameters(), pb = b->named_parameters();
    for (const auto& p : pb) {
      const std::string& n = p.key();
      if (n.find(".k.weight") != std::string::npos || n.find(".v.weight") != std::string::npos)
        p.value().copy_(pa[n].repeat({4, 1}));
      else
        p.value().copy_(pa[n]);
    }
  }
  auto tokens = torch::randint(0, 320, {2, 32}, torch::kLong);
  EXPECT_TRUE(torch::allclose(a->forward(tokens), b->forward(tokens), 1e-5, 1e-5));
}

TEST(Llama, InitialLossIsNearUniformOverTheVocabulary) {
  torch::manual_seed(4);
  auto llama = make_model(tiny_llama());
  auto tokens = torch::randint(0, 320, {4, 32}, torch::kLong);
  const double loss =
      lm_loss(llama->forward(tokens), torch::randint(0, 320, {4, 32}, torch::kLong)).item<double>();
  EXPECT_NEAR(loss, std::log(320.0), 0.3);
}

TEST(Llama, RunsInBf16WithGradientsInBf16) {
  torch::manual_seed(4);
  auto tokens = torch::randint(0, 320, {2, 32}, torch::kLong);
  auto targets = torch::randint(0, 320, {2, 32}, torch::kLong);
  const double fp32 = lm_loss(make_model(tiny_llama())->forward(tokens), targets).item<double>();
  torch::manual_seed(4);
  auto low = make_model(tiny_llama());
  low->to(torch::kBFloat16);
  auto loss = lm_loss(low->forward(tokens), targets);
  loss.backward();
  EXPECT_NEAR(loss.item<double>(), fp32, 0.02 * fp32);
  for (const auto& p : low->parameters()) EXPECT_EQ(p.grad().scalar_type(), torch::kBFloat16);
}

}  // namespace
}  // namespace troupe
