// `troupe profile FILE`: every layer of the job's GPT with its parameters, FLOPs and
// measured forward and backward times; the totals are the layers' sums. Every step's
// metrics carry its FLOPs and MFU; `troupe profile-device` measures this machine.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>

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
  // Every timed pass, whole, in order (what `troupe simulate` replays as the machine's noise):
  // each is all layers' times of that pass.
  ASSERT_EQ(j.at("passes").size(), 2u);
  for (const auto& pass : j.at("passes")) {
    EXPECT_GT(pass.at("forward_ms").get<double>(), 0);
    EXPECT_GT(pass.at("backward_ms").get<double>(), 0);
  }
  auto table = run_command(
      std::string(TROUPE_BINARY) + " profile " + TROUPE_SOURCE_DIR + "/configs/tiny-gpt.toml --repeats 1",
      120);
  ASSERT_EQ(table.exit_code, 0) << table.output;
  EXPECT_NE(table.output.find("fwd GFLOP/s"), std::string::npos) << table.output;
  EXPECT_NE(table.output.find("total"), std::string::npos) << table.output;
  EXPECT_NE(table.output.find("(MFU)"), std::string::npos) << table.output;
}

// --warmup-seconds: untimed passes for that long before the timed ones (what `troupe
// simulate --warmup-seconds` asks of its measuring processes); outside 0-600 it is refused.
TEST(Profile, WarmsUpForTheSecondsAskedBeforeTiming) {
  const std::string profile = std::string(TROUPE_BINARY) + " profile " + TROUPE_SOURCE_DIR +
                              "/configs/tiny-gpt.toml --set model.n_layers=1 --repeats 1 --json";
  const auto start = std::chrono::steady_clock::now();
  auto r = run_command(profile + " --warmup-seconds 1.5", 120);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  EXPECT_DOUBLE_EQ(j.at("warmup_s").get<double>(), 1.5);
  EXPECT_EQ(j.at("passes").size(), 1u);
  EXPECT_GE(took, 1.5) << "the warm-up passes ran before the timed one";
  auto bad = run_command(profile + " --warmup-seconds -1", 120);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--warmup-seconds"), std::string::npos) << bad.output;
}

TEST(Profile, EveryStepsMetricsCarryItsFlopsAndMfu) {
  const std::string dir = make_temp_dir();
  const std::string job = std::string(TROUPE_SOURCE_DIR) + "/configs/tiny-gpt.toml --set train.steps=2";
  auto run = run_command(std::string(TROUPE_BINARY) + " run " + job + " --metrics " + dir + "/m.jsonl", 120);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  auto profile = run_command(std::string(TROUPE_BINARY) + " profile " + job + " --repeats 1 --json", 120);
  ASSERT_EQ(profile.exit_code, 0) << profile.output;
  auto flops = nlohmann::json::parse(profile.output.substr(profile.output.find('{')));
  std::ifstream lines(dir + "/m.jsonl");
  std::string line;
  int steps = 0;
  while (std::getline(lines, line)) {
    auto m = nlohmann::json::parse(line);
    // The profile's micro-batch FLOPs (forward and backward) over both ranks' micro-batches.
    EXPECT_DOUBLE_EQ(m.at("step_flops").get<double>(), 2 * flops.at("step_flops").get<double>());
    EXPECT_GT(m.at("mfu").get<double>(), 0);
    EXPECT_LT(m.at("mfu").get<double>(), 1.5);
    ++steps;
  }
  EXPECT_EQ(steps, 2);
}

TEST(ProfileDevice, MeasuresThisMachineIntoADeviceFile) {
  auto r = run_command(std::string(TROUPE_BINARY) + " profile-device --quick --json", 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto d = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  EXPECT_EQ(d.at("kind"), "cpu");
  EXPECT_GT(d.at("gemm_flops").at("fp32").get<double>(), 1e8);
  EXPECT_GT(d.at("gemm_flops").at("bf16").get<double>(), 0);
  EXPECT_GE(d.at("gemm_samples").size(), 4u);  // two shapes each of fp32 and bf16
  EXPECT_GT(d.at("memory_bandwidth").get<double>(), 1e8);
  EXPECT_GT(d.at("optimizer_elements_per_s").get<double>(), 1e6);
  EXPECT_GT(d.at("transport_bandwidth").get<double>(), 1e6);
  EXPECT_GT(d.at("transport_latency_s").get<double>(), 0);
  EXPECT_EQ(d.at("collective_busbw").size(), 3u);
  EXPECT_EQ(d.at("collective_busbw_beside_compute").size(), 3u);
  // And among twice as many ranks as cores, where this machine has more than one.
  const int64_t cores = d.at("cores").get<int64_t>();
  if (cores > 1) {
    const std::string crowded = std::to_string(std::min<int64_t>(2 * cores, 16));
    EXPECT_EQ(d.at("collective_busbw_by_ranks").at(crowded).size(), 3u);
    EXPECT_GT(d.at("transport_hop_latency_by_ranks").at(crowded).get<double>(), 0);
  }
  EXPECT_GT(d.at("transport_hop_latency_by_ranks").at("2").get<double>(), 0);
  EXPECT_NE(d.at("source").get<std::string>().find("measured by troupe profile-device"), std::string::npos);
  auto bad =
      run_command(std::string(TROUPE_BINARY) + " profile-device --quick --nvme-dir /nonexistent/dir", 120);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("troupe bench nvme --dir /nonexistent/dir gave no figures"), std::string::npos)
      << bad.output;
}

}  // namespace
}  // namespace troupe::testing
