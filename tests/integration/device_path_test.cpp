// The GPU rank's path through the actors, run on the CPU between real processes: the
// stage on an IssuingStream, gradient rows in "device" memory reduced by the device
// collectives (staged over UCX), the fused device Adam (its CPU twin here), the host mirror
// of [offload], and LibTorch's optimizer on the device tensors. Through `troupe run` with
// CPU streams standing in for a GPU's (TROUPE_DEVICE_PATH=cpu), each job trains like the
// single-process reference, step for step; through device_path_rank.cpp, like the host path.
#include <gtest/gtest.h>

#include <algorithm>
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
#include "tests/support/pipeline_job.hpp"
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

// bf16 and fp16 on the device path: fp32 masters in device memory updated by the fused
// Adam from the widened gradients (no tier), or on the host tier with the 16-bit copy
// streamed back (ZeRO-Offload's shape), the loss scaler's overflow found in the gradients'
// norm on the device and agreed by every rank. Held to the reference in the same precision
// (`--reference` with its dtype): losses within 1e-3 relative, the final parameters within
// 1e-2 of their norm, as precision_test holds the host path.
struct MixedJob {
  DeviceJob job;
  std::string precision;  ///< --set flags of [precision]
};

class DevicePathMixed : public ::testing::TestWithParam<MixedJob> {};

TEST_P(DevicePathMixed, TrainsLikeTheReferenceInItsPrecision) {
  const MixedJob m = GetParam();
  const testing::TrainedRun ref =
      train_gpt("", " --reference", DeviceJob{1, 1, "none", 0}, testing::make_temp_dir(), m.precision);
  const testing::TrainedRun run =
      train_gpt("TROUPE_DEVICE_PATH=cpu", "", m.job, testing::make_temp_dir(), m.precision);
  ASSERT_EQ(ref.losses.size(), 20u);
  ASSERT_EQ(run.losses.size(), 20u);
  double worst = 0;
  for (std::size_t s = 0; s < 20; ++s) {
    const double gap = std::abs(run.losses[s] - ref.losses[s]) / std::abs(ref.losses[s]);
    EXPECT_LT(gap, 1e-3) << describe(m.job) << m.precision << ", step " << s + 1;
    worst = std::max(worst, gap);
  }
  EXPECT_LT(ref.losses.back(), ref.losses.front()) << "the reference must learn";
  EXPECT_EQ(run.skipped, ref.skipped) << "the same overflow steps skipped";
  const double parameters = testing::parameter_distance(run.parameters, ref.parameters);
  EXPECT_LT(parameters, 1e-2) << describe(m.job) << m.precision;
  std::printf(
      "device path on the CPU:%s: %s: worst loss difference %.1e relative, parameters %.1e of their norm\n",
      m.precision.c_str(), describe(m.job).c_str(), worst, parameters);
}

INSTANTIATE_TEST_SUITE_P(
    Precision, DevicePathMixed,
    ::testing::Values(MixedJob{DeviceJob{2, 1, "none", 2}, " --set precision.dtype=bf16"},
                      MixedJob{DeviceJob{2, 2, "cpu", 2}, " --set precision.dtype=bf16"},
                      MixedJob{DeviceJob{2, 1, "none", 0},
                               " --set precision.dtype=bf16"
                               " --set precision.communication_data_type=fp32"},
                      MixedJob{DeviceJob{2, 1, "none", 3}, " --set precision.dtype=fp16"}),
    [](const auto& info) {
      const MixedJob& m = info.param;
      return "Zero" + std::to_string(m.job.zero) + "Offload" + m.job.offload +
             (m.precision.find("fp16") != std::string::npos ? "Fp16" : "Bf16") +
             (m.precision.find("communication") != std::string::npos ? "ReducedInFp32" : "");
    });

// A checkpoint saved on the device path every 5 steps (the fused Adam's partition copied out
// on the d2h stream, or the host tier's mirror): resumed there from step 10 it continues bit
// for bit; a CPU job (the host path) loads it too and continues within rounding.
class DevicePathCheckpoint : public ::testing::TestWithParam<DeviceJob> {};

std::string saving_into(const std::string& dir) {
  return " --set checkpoint.dir=" + dir + " --set checkpoint.every_steps=5 --set checkpoint.keep_last=4";
}

// `precision`: [precision] flags; the host path continues within `tolerance` of the device's.
void expect_checkpoint_resumes(const DeviceJob& j, const std::string& precision, double tolerance) {
  const std::string root = testing::make_temp_dir();
  const std::string step_10 = root + "/ckpt/step-00000010";
  testing::TrainedRun whole = train_gpt("TROUPE_DEVICE_PATH=cpu", "", j, testing::make_temp_dir(),
                                        saving_into(root + "/ckpt") + precision);
  ASSERT_EQ(whole.losses.size(), 20u);
  testing::TrainedRun resumed = train_gpt("TROUPE_DEVICE_PATH=cpu", "", j, testing::make_temp_dir(),
                                          saving_into(root + "/again") + precision + " --resume " + step_10);
  ASSERT_EQ(resumed.losses.size(), 10u) << describe(j) << ": steps 11-20 only";
  for (std::size_t s = 0; s < 10; ++s)
    EXPECT_EQ(resumed.losses[s], whole.losses[s + 10]) << describe(j) << ", step " << s + 11;
  ASSERT_EQ(resumed.parameters.size(), whole.parameters.size());
  EXPECT_EQ(0, std::memcmp(resumed.parameters.data(), whole.parameters.data(), whole.parameters.size() * 4))
      << describe(j) << ": the final parameters differ";
  testing::TrainedRun on_cpu = train_gpt("", "", j, testing::make_temp_dir(),
                                         saving_into(root + "/cpu") + precision + " --resume " + step_10);
  ASSERT_EQ(on_cpu.losses.size(), 10u);
  double worst = 0;
  for (std::size_t s = 0; s < 10; ++s) {
    const double gap = std::abs(on_cpu.losses[s] - whole.losses[s + 10]) / whole.losses[s + 10];
    EXPECT_LT(gap, tolerance) << describe(j) << ", step " << s + 11 << " on the host path";
    worst = std::max(worst, gap);
  }
  const double parameters = testing::parameter_distance(on_cpu.parameters, whole.parameters);
  EXPECT_LT(parameters, tolerance) << describe(j);
  std::printf(
      "device path checkpoint:%s %s: resumed bit for bit; the host path from it: losses %.1e, "
      "parameters %.1e\n",
      precision.c_str(), describe(j).c_str(), worst, parameters);
}

TEST_P(DevicePathCheckpoint, ResumesBitForBitAndLoadsIntoACpuJob) {
  expect_checkpoint_resumes(GetParam(), "", 1e-5);
}

// bf16 with the fp32 masters in device memory: the masters are saved, and the 16-bit copy
// rounded from them again on resume. The host path widens and rounds with its own kernels.
TEST(DevicePathCheckpoint, Bf16MastersOnTheDeviceResumeBitForBit) {
  expect_checkpoint_resumes(DeviceJob{2, 1, "none", 2}, " --set precision.dtype=bf16", 1e-3);
}

// The fused Adam's partition on the device (ZeRO 0 and 3), and the host tier's mirror.
INSTANTIATE_TEST_SUITE_P(Saved, DevicePathCheckpoint,
                         ::testing::Values(DeviceJob{2, 1, "none", 0}, DeviceJob{2, 2, "none", 3},
                                           DeviceJob{2, 1, "cpu", 2}, DeviceJob{2, 1, "nvme", 1}),
                         name_of);

// Pipelines on the device path: each stage's layers on the device, its data-parallel
// group's collectives staged through host memory on that group's communicator, tied
// weights summed between the stages through the same actor, activations and their
// gradients between the stages over UCX; one schedule a rank's chunks share one stream
// (1f1b), the other a V of two chunks per rank with split backwards (zbv).
class DevicePathPipeline : public ::testing::TestWithParam<testing::PipelineJob> {};

TEST_P(DevicePathPipeline, TrainsLikeTheReference) {
  testing::expect_pipeline_parity(GetParam(), "TROUPE_DEVICE_PATH=cpu");
}

INSTANTIATE_TEST_SUITE_P(Stages, DevicePathPipeline,
                         ::testing::Values(testing::PipelineJob{2, 2, 4, "1f1b", 1, 0.5, "", true},
                                           testing::PipelineJob{2, 2, 4, "zbv", 0, 0.5, ""},
                                           testing::PipelineJob{2, 2, 8, "zbv", 2, 0, ""},
                                           testing::PipelineJob{2, 2, 4, "1f1b", 3, 0, ""}),
                         [](const auto& info) { return testing::test_name(info.param); });

// What the device path cannot run yet is refused before step 1, naming the key.
TEST(DevicePathRun, WhatItCannotRunYetIsRefusedAtItsKey) {
  auto r = testing::run_command(
      std::string("TROUPE_DEVICE_PATH=cpu ") + TROUPE_BINARY + " run " + TROUPE_SOURCE_DIR +
          "/configs/tiny-gpt.toml --set cluster.world_size=2 --set parallel.dp=2 --set offload.param=cpu"
          " --set zero.stage=3 --set train.steps=1",
      60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("with the device path on the CPU (TROUPE_DEVICE_PATH=cpu): a GPU rank keeps its "
                          "parameter partition in device memory"),
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
