// Engine::finish() embedded in a trainer's process (one rank): the finishing runs once, and a
// second call returns what the first did, so a failure the first met (here, a trace file
// that cannot be written) is never turned into a success by calling again.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "runtime/config/load.hpp"
#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"
#include "troupe/troupe.hpp"

namespace troupe {
namespace {

MicroBatch samples(int64_t first, int64_t count) {
  torch::Tensor x = torch::arange(first, first + count, torch::kFloat32).unsqueeze(1) / 100.0;
  return MicroBatch{x, 2.0 * x};
}

Trainable line_fit() {
  torch::manual_seed(7);
  Trainable t;
  t.layers = torch::nn::Sequential(torch::nn::Linear(1, 1));
  t.loss = [](const torch::Tensor& out, const torch::Tensor& y) { return torch::mse_loss(out, y); };
  t.data = samples;
  return t;
}

std::unique_ptr<Engine> engine_tracing_to(const std::string& trace_path) {
  auto config = load_config_string("", "job.toml",
                                   {"cluster.coordinator=" + testing::free_coordinator(),
                                    "batch.micro_batch_size=4", "trace.path=" + trace_path});
  EXPECT_TRUE(config.ok()) << config.error().message;
  if (!config.ok()) return nullptr;
  auto engine = Engine::make(*config, line_fit(), RankEnvironment{0, 1, 0, 1, "", "test", ""});
  EXPECT_TRUE(engine.ok()) << engine.error().message;
  return engine.ok() ? std::move(*engine) : nullptr;
}

TEST(EngineFinish, ASecondCallReturnsTheFirstOnesFailure) {
  const std::string dir = testing::make_temp_dir();
  testing::write_file(dir + "/a-file", "not a folder");
  auto engine = engine_tracing_to(dir + "/a-file/trace.json");
  ASSERT_TRUE(engine);
  ASSERT_TRUE(engine->train_batch().ok());
  auto first = engine->finish();
  ASSERT_FALSE(first.ok()) << "the trace under a file was written";
  EXPECT_NE(first.error().message.find(dir + "/a-file/"), std::string::npos) << first.error().message;
  auto second = engine->finish();
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().message, first.error().message);
}

TEST(EngineFinish, ASecondCallAfterASuccessIsASuccess) {
  const std::string dir = testing::make_temp_dir();
  auto engine = engine_tracing_to(dir + "/trace.json");
  ASSERT_TRUE(engine);
  ASSERT_TRUE(engine->train_batch().ok());
  auto first = engine->finish();
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_FALSE(testing::read_file(dir + "/trace.json").empty());
  EXPECT_TRUE(engine->finish().ok());
}

}  // namespace
}  // namespace troupe
