// ModelParameters: each trainable tensor once, who owns and who borrows it, and the models
// troupe refuses before anything starts, with a sentence naming the parameter.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "actors/model_parameters.hpp"
#include "troupe/troupe.hpp"

namespace troupe {
namespace {

using Named = std::vector<std::pair<std::string, torch::Tensor>>;

// Registers the given tensors under the given names.
struct HolderImpl : torch::nn::Module {
  explicit HolderImpl(const Named& tensors) {
    for (const auto& [name, t] : tensors) register_parameter(name, t, t.requires_grad());
  }
  torch::Tensor forward(const torch::Tensor& x) { return x; }
};
TORCH_MODULE(Holder);

Holder hold(const Named& tensors) {
  return Holder(tensors);
}

torch::Tensor trainable(std::vector<int64_t> sizes) {
  return torch::randn(sizes).requires_grad_();
}

TEST(ModelParameters, ATensorInTwoLayersIsOwnedByTheFirstAndBorrowedByTheOther) {
  torch::Tensor shared = trainable({4, 3}), own = trainable({5});
  torch::nn::Sequential model(hold({{"w", shared}}), torch::nn::Tanh(), hold({{"b", own}, {"tied", shared}}));
  auto m = model_parameters(model);
  ASSERT_TRUE(m.ok()) << m.error().message;
  ASSERT_EQ(m->tensors.size(), 2u);
  EXPECT_TRUE(m->tensors[0].is_same(shared));
  EXPECT_EQ(m->names, (std::vector<std::string>{"0.w", "2.b"}));
  EXPECT_EQ(m->owned, (std::vector<std::vector<std::size_t>>{{0}, {}, {1}}));
  EXPECT_EQ(m->borrowed, (std::vector<std::vector<std::size_t>>{{}, {}, {0}}));
  EXPECT_EQ(m->owned_counts(), (std::vector<std::vector<std::size_t>>{{12}, {}, {5}}));
  EXPECT_EQ(m->elements(), 17);
  EXPECT_EQ(unique_parameters(*model).size(), 2u) << "one tensor, whichever layer lists it";
}

TEST(ModelParameters, ATensorRegisteredTwiceInOneLayerCountsOnce) {
  torch::Tensor w = trainable({6});
  torch::nn::Sequential model(hold({{"weight", w}, {"alias", w}}));
  auto m = model_parameters(model);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->tensors.size(), 1u);
  EXPECT_EQ(m->borrowed, (std::vector<std::vector<std::size_t>>{{}})) << "nothing borrowed within a layer";
  EXPECT_EQ(unique_parameters(*model).size(), 1u);
}

TEST(ModelParameters, DisjointPiecesOfOneBufferAreSeparateParameters) {
  torch::Tensor buffer = torch::randn({10});
  torch::Tensor a = buffer.narrow(0, 0, 5).detach().requires_grad_();
  torch::Tensor b = buffer.narrow(0, 5, 5).detach().requires_grad_();
  torch::nn::Sequential model(hold({{"a", a}}), hold({{"b", b}}));
  auto m = model_parameters(model);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->tensors.size(), 2u);
}

TEST(ModelParameters, AViewOfAnotherParameterIsRefusedNamingBoth) {
  torch::Tensor w = trainable({4, 3});
  torch::Tensor view = w.detach().t().requires_grad_();  // the same memory, another tensor
  torch::nn::Sequential model(hold({{"weight", w}}), hold({{"transposed", view}}));
  auto m = model_parameters(model);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(
      m.error().message,
      "parameter '1.transposed' overlaps the memory of parameter '0.weight' but is a different tensor (a "
      "view or alias of it), so an optimizer step would update that memory twice; to share a weight "
      "between layers, register the same tensor in each of them");
}

TEST(ModelParameters, OtherTypesFrozenParametersAndTwoDevicesAreRefused) {
  torch::nn::Sequential half(hold({{"h", torch::randn({3}, torch::kFloat64).requires_grad_()}}));
  EXPECT_EQ(model_parameters(half).error().message,
            "parameter '0.h' is Double, but troupe trains fp32 (Float) parameters");
  torch::nn::Sequential frozen(hold({{"ok", trainable({2})}}), hold({{"f", torch::randn({3})}}));
  EXPECT_EQ(
      model_parameters(frozen).error().message,
      "parameter '1.f' does not require a gradient (it is frozen), but troupe updates every parameter it "
      "is given: leave frozen tensors out of the layers' parameters (register them as buffers)");
}

TEST(ModelParameters, TheEngineRefusesSuchAModelBeforeAnythingStarts) {
  auto config =
      load_config_string("", "job.toml", {"cluster.coordinator=127.0.0.1:1", "batch.micro_batch_size=1"});
  ASSERT_TRUE(config.ok()) << config.error().message;
  torch::Tensor w = trainable({4, 3});
  torch::nn::Sequential model(hold({{"weight", w}}), hold({{"transposed", w.detach().t().requires_grad_()}}));
  Trainable t{model,
              [](const torch::Tensor& out, const torch::Tensor&) { return out.sum(); },
              [](int64_t, int64_t) {
                return MicroBatch{torch::zeros({1, 3}), torch::zeros({1})};
              },
              nullptr,
              nullptr,
              nullptr};
  auto engine = Engine::make(*config, std::move(t), RankEnvironment{0, 1, 0, 1, "", "test", ""});
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.error().message.rfind("rank 0: parameter '1.transposed' overlaps the memory of parameter "
                                         "'0.weight'",
                                         0),
            0u)
      << engine.error().message;
}

}  // namespace
}  // namespace troupe
