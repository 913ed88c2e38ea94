// `troupe profile FILE`: every layer of the job's GPT with its parameters, FLOPs and
// measured forward and backward times; the totals are the layers' sums.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/integration/command.hpp"

namespace troupe::testing {
namespace {

TEST(Profile, PrintsEveryLayerWithItsFlopsAndTimes) {
  auto r = run_command(
      std::string(TROUPE_BINARY) + " profile " + TROUPE_SOURCE_DIR +
          "/configs/tiny-gpt.toml --set model.n_layers=3 --set batch.gradient_accumulation_steps=2"
          " --repeats 2 --json",
      120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  ASSERT_EQ(j.at("layers").size(), 5u);  // embedding, 3 blocks, head
  double forward = 0, forward_ms = 0;
  int64_t parameters = 0;
  for (const auto& layer : j.at("layers")) {
    forward += layer.at("forward_flops").get<double>();
    forward_ms += layer.at("forward_ms").get<double>();
    parameters += layer.at("parameters").get<int64_t>();
    EXPECT_GT(layer.at("backward_ms").get<double>(), 0) << layer.at("name");
  }
  EXPECT_EQ(j.at("layers")[1].at("name"), "block0");
  EXPECT_DOUBLE_EQ(j.at("forward_flops").get<double>(), forward);
  EXPECT_NEAR(j.at("forward_ms").get<double>(), forward_ms, 1e-9 * forward_ms);
  EXPECT_DOUBLE_EQ(j.at("step_flops").get<double>(), 2 * 3 * forward);  // 2 micro-batches, backward 2×
  EXPECT_GT(j.at("gemm_peak_flops").get<double>(), 1e8);
  EXPECT_GT(j.at("mfu").get<double>(), 0);
  EXPECT_LT(j.at("mfu").get<double>(), 1.5) << "a model's rate is a share of the GEMM's, give or take noise";
  // tiny-gpt with 3 blocks of d 64, MLP 256, untied head: its parameters.
  EXPECT_EQ(parameters, 256 * 64 + 64 * 64 + 3 * 49984 + 2 * 64 + 256 * 64);
  auto table = run_command(
      std::string(TROUPE_BINARY) + " profile " + TROUPE_SOURCE_DIR + "/configs/tiny-gpt.toml --repeats 1",
      120);
  ASSERT_EQ(table.exit_code, 0) << table.output;
  EXPECT_NE(table.output.find("fwd GFLOP/s"), std::string::npos) << table.output;
  EXPECT_NE(table.output.find("total"), std::string::npos) << table.output;
  EXPECT_NE(table.output.find("(MFU)"), std::string::npos) << table.output;
}

}  // namespace
}  // namespace troupe::testing
