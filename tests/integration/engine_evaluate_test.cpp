// Engine::evaluate() embedded in a trainer's process (one rank): without validation samples
// it is a usage error that says what it needs and leaves the engine training; with them it
// returns the mean loss over [train] eval_steps batches without updating anything, so two
// passes with no step between agree to the bit and the next step trains as if none had run.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>

#include "runtime/config/load.hpp"
#include "tests/support/free_port.hpp"
#include "troupe/troupe.hpp"

namespace troupe {
namespace {

// Four features to three classes; sample i is the same wherever it is drawn.
MicroBatch samples(int64_t first, int64_t count) {
  torch::Tensor x = torch::empty({count, 4}), y = torch::empty({count}, torch::kLong);
  for (int64_t i = 0; i < count; ++i) {
    torch::Generator g = at::detail::createCPUGenerator(static_cast<uint64_t>(first + i));
    x[i] = torch::randn({4}, g);
    y[i] = (first + i) % 3;
  }
  return MicroBatch{x, y};
}

Trainable classifier(bool with_validation) {
  torch::manual_seed(7);
  Trainable t{
      torch::nn::Sequential(torch::nn::Linear(4, 3)),
      [](const torch::Tensor& out, const torch::Tensor& y) { return torch::cross_entropy_loss(out, y); },
      samples,
      nullptr,
      nullptr,
      nullptr};
  if (with_validation)
    t.validation = [](int64_t first, int64_t count) { return samples(1000 + first, count); };
  return t;
}

std::unique_ptr<Engine> engine_for(Trainable t) {
  auto config = load_config_string("", "job.toml",
                                   {"cluster.coordinator=" + testing::free_coordinator(),
                                    "batch.micro_batch_size=4", "train.eval_steps=3"});
  EXPECT_TRUE(config.ok()) << config.error().message;
  auto engine = Engine::make(*config, std::move(t), RankEnvironment{0, 1, 0, 1, "", "test", ""});
  EXPECT_TRUE(engine.ok()) << engine.error().message;
  return engine.ok() ? std::move(*engine) : nullptr;
}

TEST(EngineEvaluate, WithoutValidationSamplesItSaysWhatItNeedsAndTrainsOn) {
  auto engine = engine_for(classifier(false));
  ASSERT_TRUE(engine);
  ASSERT_TRUE(engine->train_batch().ok());
  auto evaluated = engine->evaluate();
  ASSERT_FALSE(evaluated.ok());
  EXPECT_NE(evaluated.error().message.find("Engine::evaluate() needs Trainable::validation"),
            std::string::npos)
      << evaluated.error().message;
  auto next = engine->train_batch();
  ASSERT_TRUE(next.ok()) << next.error().message;
  EXPECT_EQ(next->step, 2);
  EXPECT_TRUE(engine->finish().ok());
}

TEST(EngineEvaluate, APassUpdatesNothing) {
  auto plain = engine_for(classifier(true));
  auto evaluating = engine_for(classifier(true));
  ASSERT_TRUE(plain && evaluating);
  ASSERT_TRUE(plain->train_batch().ok());
  ASSERT_TRUE(evaluating->train_batch().ok());
  auto first = evaluating->evaluate(), second = evaluating->evaluate();
  ASSERT_TRUE(first.ok()) << first.error().message;
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(std::isfinite(*first));
  EXPECT_EQ(*first, *second);
  auto trained = plain->train_batch(), after = evaluating->train_batch();
  ASSERT_TRUE(trained.ok() && after.ok());
  EXPECT_EQ(trained->loss, after->loss) << "the step after a pass is the step without one";
  EXPECT_TRUE(plain->finish().ok());
  EXPECT_TRUE(evaluating->finish().ok());
}

}  // namespace
}  // namespace troupe
