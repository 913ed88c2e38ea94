// The GPU rank's path through the actors, run on the CPU between real processes: the
// stage on an IssuingStream, gradient rows in "device" memory reduced by the device
// collectives (staged over UCX), the fused device Adam (its CPU twin here), the host mirror
// of [offload], and LibTorch's optimizer on the device tensors. Through `troupe run` with
// CPU streams standing in for a GPU's (TROUPE_DEVICE_PATH=cpu), each job trains like the
// single-process reference, step for step; through device_path_rank.cpp, like the host path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
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
  int zero = 0;                  ///< [zero] stage
};

std::string describe(const DeviceJob& j) {
  return "ZeRO " + std::to_string(j.zero) + ", dp " + std::to_string(j.dp) + ", accumulation " +
         std::to_string(j.accumulation) + ", offload " + j.offload;
}

// 20 steps of the small GPT on a global batch of 16, as parity_test trains it.
// `environment` prefixes the command; `how` follows `run` (" --reference").
// `dir` gets the metrics and parameters; `settings` go last (more --set flags, --resume).
testing::TrainedRun train_gpt(const std::string& environment, const std::string& how, const DeviceJob& j,
                              const std::string& dir = testing::make_temp_dir(),
                              const std::string& settings = "") {
  const int micro = 16 / j.dp / j.accumulation;
  std::string command =
      environment + " " + TROUPE_BINARY + " run" + how + " " + TROUPE_SOURCE_DIR + "/configs/tiny-gpt.toml" +
      " --set train.steps=20 --set optimizer.lr=1e-3 --set cluster.world_size=" + std::to_string(j.dp) +
      " --set parallel.dp=" + std::to_string(j.dp) +
      " --set batch.micro_batch_size=" + std::to_string(micro) +
      " --set batch.gradient_accumulation_steps=" + std::to_string(j.accumulation) +
      " --set batch.global_batch_size=16 --set zero.reduce_bucket_size=16384" +
      " --set zero.stage=" + std::to_string(j.zero) + " --set offload.optimizer=" + j.offload +
      (j.offload == "nvme" ? " --set offload.nvme_path=" + dir : "") +
      " --set cluster.coordinator=" + testing::free_coordinator() + " --metrics " + dir +
      "/metrics.jsonl --parameters-out " + dir + "/parameters.bin" + settings;
  auto r = testing::run_command(command, 240);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return testing::read_run(dir + "/metrics.jsonl", dir + "/parameters.bin");
}

// Communication bytes at the first step's peak, from the metrics under `dir`.
int64_t first_communication_bytes(const std::string& dir) {
  std::ifstream metrics(dir + "/metrics.jsonl");
  std::string first;
  std::getline(metrics, first);
  return first.empty() ? 0 : nlohmann::json::parse(first).value("communication_bytes", int64_t{0});
}

class DevicePathRun : public ::testing::TestWithParam<DeviceJob> {};

TEST_P(DevicePathRun, TrainsLikeTheReference) {
  static const testing::TrainedRun ref = train_gpt("", " --reference", DeviceJob{1, 1, "none", 0});
  const DeviceJob j = GetParam();
  const std::string dir = testing::make_temp_dir();
  testing::TrainedRun run = train_gpt("TROUPE_DEVICE_PATH=cpu", "", j, dir);
  if (j.dp > 1) {
    // The device path's collectives were staged through host buffers, charged as
    // communication beyond what the host path's own (bucket slots) is.
    const std::string host_dir = testing::make_temp_dir();
    train_gpt("", "", j, host_dir);
    const int64_t staged = first_communication_bytes(dir), host = first_communication_bytes(host_dir);
    EXPECT_GT(staged, host) << "staged collectives: " << staged << " bytes of communication, the host path "
                            << host;
  }
  testing::ParityFigures worst = testing::expect_parity(run, ref, 20);
  std::printf(
      "device path on the CPU: %s: worst loss difference %.2e relative, parameters %.2e of their norm\n",
      describe(j).c_str(), worst.loss, worst.parameters);
}

std::string name_of(const ::testing::TestParamInfo<DeviceJob>& info) {
  const DeviceJob& j = info.param;
  return "Zero" + std::to_string(j.zero) + "Dp" + std::to_string(j.dp) + "Accumulation" +
         std::to_string(j.accumulation) + "Offload" + j.offload;
}

INSTANTIATE_TEST_SUITE_P(ZeroZero, DevicePathRun,
                         ::testing::Values(DeviceJob{1, 1, "none", 0}, DeviceJob{2, 1, "none", 0},
                                           DeviceJob{2, 2, "none", 0}, DeviceJob{2, 2, "cpu", 0},
                                           DeviceJob{2, 1, "nvme", 0}),
                         name_of);

// ZeRO 1-3 with their partitions, buckets and gathered rows in the device's memory, every
// tier of the optimizer state (stage 3's parameter partition stays on the device).
INSTANTIATE_TEST_SUITE_P(Partitioned, DevicePathRun,
                         ::testing::Values(DeviceJob{2, 1, "none", 1}, DeviceJob{2, 2, "cpu", 1},
                                           DeviceJob{2, 1, "nvme", 1}, DeviceJob{2, 2, "none", 2},
                                           DeviceJob{2, 1, "cpu", 2}, DeviceJob{2, 1, "nvme", 2},
                                           DeviceJob{2, 2, "none", 3}, DeviceJob{2, 1, "cpu", 3},
                                           DeviceJob{2, 1, "nvme", 3}),
                         name_of);

// A checkpoint saved on the device path every 5 steps (the fused Adam's partition copied out
// on the d2h stream, or the host tier's mirror): resumed there from step 10 it continues bit
// for bit; a CPU job (the host path) loads it too and continues within rounding.
class DevicePathCheckpoint : public ::testing::TestWithParam<DeviceJob> {};

std::string saving_into(const std::string& dir) {
  return " --set checkpoint.dir=" + dir + " --set checkpoint.every_steps=5 --set checkpoint.keep_last=4";
}

TEST_P(DevicePathCheckpoint, ResumesBitForBitAndLoadsIntoACpuJob) {
  const DeviceJob j = GetParam();
  const std::string root = testing::make_temp_dir();
  const std::string step_10 = root + "/ckpt/step-00000010";
  testing::TrainedRun whole =
      train_gpt("TROUPE_DEVICE_PATH=cpu", "", j, testing::make_temp_dir(), saving_into(root + "/ckpt"));
  ASSERT_EQ(whole.losses.size(), 20u);
  testing::TrainedRun resumed = train_gpt("TROUPE_DEVICE_PATH=cpu", "", j, testing::make_temp_dir(),
                                          saving_into(root + "/again") + " --resume " + step_10);
  ASSERT_EQ(resumed.losses.size(), 10u) << describe(j) << ": steps 11-20 only";
  for (std::size_t s = 0; s < 10; ++s)
    EXPECT_EQ(resumed.losses[s], whole.losses[s + 10]) << describe(j) << ", step " << s + 11;
  ASSERT_EQ(resumed.parameters.size(), whole.parameters.size());
  EXPECT_EQ(0, std::memcmp(resumed.parameters.data(), whole.parameters.data(), whole.parameters.size() * 4))
      << describe(j) << ": the final parameters differ";
  testing::TrainedRun on_cpu =
      train_gpt("", "", j, testing::make_temp_dir(), saving_into(root + "/cpu") + " --resume " + step_10);
  ASSERT_EQ(on_cpu.losses.size(), 10u);
  double worst = 0;
  for (std::size_t s = 0; s < 10; ++s) {
    const double gap = std::abs(on_cpu.losses[s] - whole.losses[s + 10]) / whole.losses[s + 10];
    EXPECT_LT(gap, 1e-5) << describe(j) << ", step " << s + 11 << " on the host path";
    worst = std::max(worst, gap);
  }
  const double parameters = testing::parameter_distance(on_cpu.parameters, whole.parameters);
  EXPECT_LT(parameters, 1e-5) << describe(j);
  std::printf(
      "device path checkpoint: %s: resumed bit for bit; the host path from it: losses %.1e, "
      "parameters %.1e\n",
      describe(j).c_str(), worst, parameters);
}

// The fused Adam's partition on the device (ZeRO 0 and 3), and the host tier's mirror.
INSTANTIATE_TEST_SUITE_P(Saved, DevicePathCheckpoint,
                         ::testing::Values(DeviceJob{2, 1, "none", 0}, DeviceJob{2, 2, "none", 3},
                                           DeviceJob{2, 1, "cpu", 2}, DeviceJob{2, 1, "nvme", 1}),
                         name_of);

// What the device path cannot run yet is refused before step 1, naming the key.
TEST(DevicePathRun, WhatItCannotRunYetIsRefusedAtItsKey) {
  auto r = testing::run_command(std::string("TROUPE_DEVICE_PATH=cpu ") + TROUPE_BINARY + " run " +
                                    TROUPE_SOURCE_DIR +
                                    "/configs/tiny-gpt.toml --set precision.dtype=bf16 --set train.steps=1",
                                60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(
      r.output.find("[precision] dtype = \"bf16\" with the device path on the CPU (TROUPE_DEVICE_PATH=cpu)"),
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
