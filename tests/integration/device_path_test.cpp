// The GPU rank's path through the actors, run on the CPU between real processes: the
// stage on an IssuingStream, gradient rows in "device" memory reduced by the device
// collectives (staged over UCX), the fused device Adam (its CPU twin here), the host mirror
// of [offload], and LibTorch's optimizer on the device tensors. Through `troupe run` with
// CPU streams standing in for a GPU's (TROUPE_DEVICE_PATH=cpu), each job trains like the
// single-process reference, step for step; through device_path_rank.cpp, like the host path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"
#include "tests/support/parity.hpp"
#include "tests/support/trained_run.hpp"

namespace troupe {
namespace {

struct Trained {
  std::vector<double> losses;
  double parameter_norm = 0;
};

Trained train(int ranks, const std::string& mode) {
  auto r = testing::run_command(std::string(TROUPE_BINARY) + " launch --ranks " + std::to_string(ranks) +
                                    " -- " + DEVICE_PATH_RANK_BINARY + " " +
                                    std::to_string(testing::free_port()) + " " + mode + " 12",
                                120);
  EXPECT_EQ(r.exit_code, 0) << mode << ": " << r.output;
  Trained run;
  run.losses = testing::printed_losses(r.output);
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);)
    if (auto at = line.find("parameter-norm "); at != std::string::npos)
      std::sscanf(line.c_str() + at, "parameter-norm %lf", &run.parameter_norm);
  return run;
}

void expect_same_training(const Trained& path, const Trained& host, double tolerance,
                          const std::string& what) {
  ASSERT_EQ(path.losses.size(), 12u) << what;
  ASSERT_EQ(host.losses.size(), 12u) << what;
  for (std::size_t s = 0; s < host.losses.size(); ++s)
    EXPECT_NEAR(path.losses[s], host.losses[s], tolerance * std::abs(host.losses[s]))
        << what << ", step " << s + 1;
  EXPECT_LT(host.losses.back(), host.losses.front())
      << "the model must learn for the comparison to mean much";
  EXPECT_GT(host.parameter_norm, 0);
  EXPECT_NEAR(path.parameter_norm, host.parameter_norm, tolerance * host.parameter_norm) << what;
}

class DevicePath : public ::testing::TestWithParam<int> {};

TEST_P(DevicePath, TrainsLikeTheHostPath) {
  int ranks = GetParam();
  Trained host = train(ranks, "host");
  // The same fused arithmetic on the same reduced gradients: the same values.
  expect_same_training(train(ranks, "device"), host, 1e-6, "device Adam");
  expect_same_training(train(ranks, "device-offload"), host, 1e-6, "host mirror");
  // LibTorch's AdamW: bit for bit on AVX CPUs, a few ulp apart on the scalar path.
  expect_same_training(train(ranks, "device-torch"), host, 1e-5, "LibTorch's AdamW");
}

INSTANTIATE_TEST_SUITE_P(Ranks, DevicePath, ::testing::Values(1, 2),
                         [](const auto& info) { return std::to_string(info.param) + "Ranks"; });

struct DeviceJob {
  int dp = 2;
  int accumulation = 1;
  std::string offload = "none";  ///< [offload] optimizer
};

std::string describe(const DeviceJob& j) {
  return "dp " + std::to_string(j.dp) + ", accumulation " + std::to_string(j.accumulation) + ", offload " +
         j.offload;
}

// 20 steps of the small GPT on a global batch of 16, as parity_test trains it.
// `environment` prefixes the command; `how` follows `run` (" --reference").
// `dir` gets the metrics and parameters.
testing::TrainedRun train_gpt(const std::string& environment, const std::string& how, const DeviceJob& j,
                              const std::string& dir = testing::make_temp_dir()) {
  const int micro = 16 / j.dp / j.accumulation;
  std::string command =
      environment + " " + TROUPE_BINARY + " run" + how + " " + TROUPE_SOURCE_DIR + "/configs/tiny-gpt.toml" +
      " --set train.steps=20 --set optimizer.lr=1e-3 --set cluster.world_size=" + std::to_string(j.dp) +
      " --set parallel.dp=" + std::to_string(j.dp) +
      " --set batch.micro_batch_size=" + std::to_string(micro) +
      " --set batch.gradient_accumulation_steps=" + std::to_string(j.accumulation) +
      " --set batch.global_batch_size=16 --set zero.reduce_bucket_size=16384" +
      " --set offload.optimizer=" + j.offload +
      (j.offload == "nvme" ? " --set offload.nvme_path=" + dir : "") +
      " --set cluster.coordinator=" + testing::free_coordinator() + " --metrics " + dir +
      "/metrics.jsonl --parameters-out " + dir + "/parameters.bin";
  auto r = testing::run_command(command, 240);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return testing::read_run(dir + "/metrics.jsonl", dir + "/parameters.bin");
}

class DevicePathRun : public ::testing::TestWithParam<DeviceJob> {};

TEST_P(DevicePathRun, TrainsLikeTheReference) {
  static const testing::TrainedRun ref = train_gpt("", " --reference", DeviceJob{1, 1, "none"});
  const DeviceJob j = GetParam();
  const std::string dir = testing::make_temp_dir();
  testing::TrainedRun run = train_gpt("TROUPE_DEVICE_PATH=cpu", "", j, dir);
  if (j.dp > 1) {  // the device path's rows were staged through host buffers, charged as communication
    std::ifstream metrics(dir + "/metrics.jsonl");
    std::string first;
    std::getline(metrics, first);
    EXPECT_GT(nlohmann::json::parse(first).value("communication_bytes", int64_t{0}), 0)
        << "staged collectives: " << first;
  }
  testing::ParityFigures worst = testing::expect_parity(run, ref, 20);
  std::printf(
      "device path on the CPU: %s: worst loss difference %.2e relative, parameters %.2e of their norm\n",
      describe(j).c_str(), worst.loss, worst.parameters);
}

INSTANTIATE_TEST_SUITE_P(ZeroZero, DevicePathRun,
                         ::testing::Values(DeviceJob{1, 1, "none"}, DeviceJob{2, 1, "none"},
                                           DeviceJob{2, 2, "none"}, DeviceJob{2, 2, "cpu"},
                                           DeviceJob{2, 1, "nvme"}),
                         [](const auto& info) {
                           const DeviceJob& j = info.param;
                           return "Dp" + std::to_string(j.dp) + "Accumulation" +
                                  std::to_string(j.accumulation) + "Offload" + j.offload;
                         });

// What the device path cannot run yet is refused before step 1, naming the key.
TEST(DevicePathRun, WhatItCannotRunYetIsRefusedAtItsKey) {
  auto r = testing::run_command(std::string("TROUPE_DEVICE_PATH=cpu ") + TROUPE_BINARY + " run " +
                                    TROUPE_SOURCE_DIR +
                                    "/configs/tiny-gpt.toml --set zero.stage=2 --set train.steps=1",
                                60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("[zero] stage = 2 with the device path on the CPU (TROUPE_DEVICE_PATH=cpu)"),
            std::string::npos)
      << r.output;
  r = testing::run_command(std::string("TROUPE_DEVICE_PATH=gpu ") + TROUPE_BINARY + " run " +
                               TROUPE_SOURCE_DIR + "/configs/tiny-gpt.toml --set train.steps=1",
                           60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("TROUPE_DEVICE_PATH=gpu: the one device path a CPU can stand in for is \"cpu\""),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace troupe
