// Training on the GPU (`[cluster] device = "cuda"`, ZeRO stage 0) equals plain
// single-process LibTorch on the CPU (`troupe run --reference`) to 1e-4 of the loss at
// every one of 20 fp32 steps, and ends with the same parameters: with the fused CUDA
// AdamW, with the optimizer offloaded to the host, with LibTorch's SGD on the device, and
// with gradient accumulation. A Perfetto trace of a GPU run shows the compute, comm and
// copy streams, and NCCL's all-reduce of gradient rows running during backward.
// Skips with the reason without a GPU, or where the LibTorch found has no CUDA.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/gpu/gpu_test_support.hpp"
#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"
#include "tests/support/trained_run.hpp"

namespace troupe {
namespace {

struct Outcome {
  testing::TrainedRun run;
  std::string output;
  bool ok = false;
};

// 20 steps of the tiny GPT, one rank, global batch 16, coordinating on a free port.
Outcome train(const std::string& how, const std::string& settings, const std::string& dir) {
  std::string command = std::string(TROUPE_BINARY) + " run " + TROUPE_SOURCE_DIR + "/configs/tiny-gpt.toml" +
                        how + " --set train.steps=20 --set optimizer.lr=1e-3 --set cluster.world_size=1" +
                        " --set parallel.dp=1 --set batch.global_batch_size=16 --set zero.stage=0" +
                        settings + " --set cluster.coordinator=" + testing::free_coordinator() +
                        " --metrics " + dir + "/metrics.jsonl --parameters-out " + dir + "/parameters.bin";
  auto r = testing::run_command(command, 300);
  Outcome o;
  o.output = r.output;
  o.ok = r.exit_code == 0;
  if (o.ok) o.run = testing::read_run(dir + "/metrics.jsonl", dir + "/parameters.bin");
  return o;
}

#define TROUPE_SKIP_WITHOUT_TORCH_CUDA(outcome)                  \
  if ((outcome).output.find("has no CUDA") != std::string::npos) \
  GTEST_SKIP() << "the LibTorch troupe was built against has no CUDA: " << (outcome).output

struct Variant {
  std::string name, settings;
  std::string gpu_only;  ///< where the GPU run differs from the CPU reference (not in the arithmetic)
};

class GpuTraining : public ::testing::TestWithParam<Variant> {};

TEST_P(GpuTraining, MatchesTheCpuReferenceEveryStep) {
  TROUPE_SKIP_WITHOUT_GPU();
  const Variant& v = GetParam();
  Outcome gpu = train(" --set cluster.device=cuda", v.settings + v.gpu_only, testing::make_temp_dir());
  TROUPE_SKIP_WITHOUT_TORCH_CUDA(gpu);
  ASSERT_TRUE(gpu.ok) << gpu.output;
  Outcome cpu = train(" --reference", v.settings, testing::make_temp_dir());
  ASSERT_TRUE(cpu.ok) << cpu.output;
  ASSERT_EQ(gpu.run.losses.size(), 20u);
  ASSERT_EQ(cpu.run.losses.size(), 20u);
  double worst = 0;
  for (std::size_t s = 0; s < 20; ++s) {
    double relative = std::abs(gpu.run.losses[s] - cpu.run.losses[s]) / std::abs(cpu.run.losses[s]);
    EXPECT_LT(relative, 1e-4) << v.name << ", step " << s + 1;
    worst = std::max(worst, relative);
  }
  EXPECT_LT(cpu.run.losses.back(), cpu.run.losses.front());
  double distance = testing::parameter_distance(gpu.run.parameters, cpu.run.parameters);
  EXPECT_LT(distance, 1e-3) << v.name;
  std::printf("gpu parity: %s: worst loss difference %.2e relative, parameters %.2e of their norm\n",
              v.name.c_str(), worst, distance);
}

INSTANTIATE_TEST_SUITE_P(
    Fp32, GpuTraining,
    ::testing::Values(
        Variant{"FusedAdamW", "", ""},
        Variant{"OptimizerOffloadedToTheHost", "", " --set offload.optimizer=cpu"},
        Variant{"LibTorchSgd",
                " --set optimizer.type=sgd --set optimizer.lr=0.05 --set optimizer.momentum=0.9", ""},
        Variant{"Accumulation", " --set batch.micro_batch_size=4 --set batch.gradient_accumulation_steps=4",
                ""},
        // Two ranks on one GPU ([cluster] share_gpus): the rows staged through host memory.
        Variant{"TwoRanksShareOneGpu", "",
                " --set cluster.world_size=2 --set parallel.dp=2 --set batch.micro_batch_size=8"
                " --set cluster.share_gpus=true"},
        // ZeRO 1-3 with their rows, buckets, partitions and gathered rows in device memory.
        Variant{"TwoRanksShareOneGpuZero1", " --set zero.stage=1 --set zero.reduce_bucket_size=16384",
                " --set cluster.world_size=2 --set parallel.dp=2 --set batch.micro_batch_size=8"
                " --set cluster.share_gpus=true"},
        Variant{"TwoRanksShareOneGpuZero2OptimizerOnTheHost",
                " --set zero.stage=2 --set zero.reduce_bucket_size=16384",
                " --set cluster.world_size=2 --set parallel.dp=2 --set batch.micro_batch_size=8"
                " --set cluster.share_gpus=true --set offload.optimizer=cpu"},
        Variant{"TwoRanksShareOneGpuZero3", " --set zero.stage=3 --set zero.reduce_bucket_size=16384",
                " --set cluster.world_size=2 --set parallel.dp=2 --set batch.micro_batch_size=8"
                " --set cluster.share_gpus=true"},
        // pp 2 × dp 2 on one GPU: each stage's group staged on its own communicator.
        Variant{"FourRanksShareOneGpuPp2Dp2OneFOneB",
                " --set zero.stage=1 --set zero.reduce_bucket_size=16384",
                " --set cluster.world_size=4 --set parallel.dp=2 --set parallel.pp=2"
                " --set batch.micro_batch_size=4 --set batch.gradient_accumulation_steps=2"
                " --set pipeline.schedule=1f1b --set cluster.share_gpus=true"},
        Variant{"FourRanksShareOneGpuPp2Dp2Zbv", " --set zero.stage=1 --set zero.reduce_bucket_size=16384",
                " --set cluster.world_size=4 --set parallel.dp=2 --set parallel.pp=2"
                " --set batch.micro_batch_size=4 --set batch.gradient_accumulation_steps=2"
                " --set pipeline.schedule=zbv --set cluster.share_gpus=true"},
        // tp 2 × dp 2 on one GPU: the layers' collectives staged through host memory.
        Variant{"FourRanksShareOneGpuTp2Dp2", " --set zero.stage=1 --set zero.reduce_bucket_size=16384",
                " --set cluster.world_size=4 --set parallel.dp=2 --set parallel.tp=2"
                " --set batch.micro_batch_size=8 --set cluster.share_gpus=true"}),
    [](const auto& info) { return info.param.name; });

// bf16 with fp32 masters on the GPU (the fused Adam on them) and on the host tier, ZeRO 2
// on two ranks sharing the GPU, against the reference in bf16 on the CPU: a GPU's bf16
// kernels round differently from the CPU's, so within 1e-2 (losses, relative; parameters,
// of their norm).
TEST(GpuTraining, Bf16MatchesTheBf16ReferenceWithin1e2) {
  TROUPE_SKIP_WITHOUT_GPU();
  const std::string bf16 =
      " --set precision.dtype=bf16 --set zero.stage=2 --set zero.reduce_bucket_size=16384";
  const std::string two =
      " --set cluster.world_size=2 --set parallel.dp=2 --set batch.micro_batch_size=8"
      " --set cluster.share_gpus=true";
  Outcome cpu = train(" --reference", bf16, testing::make_temp_dir());
  ASSERT_TRUE(cpu.ok) << cpu.output;
  for (const std::string tier : {"none", "cpu"}) {
    Outcome gpu = train(" --set cluster.device=cuda", bf16 + two + " --set offload.optimizer=" + tier,
                        testing::make_temp_dir());
    TROUPE_SKIP_WITHOUT_TORCH_CUDA(gpu);
    ASSERT_TRUE(gpu.ok) << gpu.output;
    ASSERT_EQ(gpu.run.losses.size(), 20u);
    double worst = 0;
    for (std::size_t s = 0; s < 20; ++s) {
      double relative = std::abs(gpu.run.losses[s] - cpu.run.losses[s]) / std::abs(cpu.run.losses[s]);
      EXPECT_LT(relative, 1e-2) << "optimizer on " << tier << ", step " << s + 1;
      worst = std::max(worst, relative);
    }
    double distance = testing::parameter_distance(gpu.run.parameters, cpu.run.parameters);
    EXPECT_LT(distance, 1e-2) << tier;
    std::printf(
        "gpu parity: bf16 ZeRO 2, optimizer on %s: worst loss difference %.2e relative, parameters %.2e\n",
        tier.c_str(), worst, distance);
  }
}

using Interval = std::pair<double, double>;

std::map<std::string, std::vector<Interval>> spans_by_track(const nlohmann::json& json,
                                                            const std::string& prefix) {
  std::map<int, std::string> names;
  for (const auto& e : json.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "thread_name" && e.at("pid") == 0)
      names[e.at("tid").get<int>()] = e.at("args").at("name");
  std::map<std::string, std::vector<Interval>> out;
  for (const auto& e : json.at("traceEvents")) {
    if (e.at("ph") != "X" || e.at("pid") != 0) continue;
    const std::string& track = names[e.at("tid").get<int>()];
    if (track.rfind(prefix, 0) != 0) continue;
    double start = e.at("ts").get<double>();
    out[track].emplace_back(start, start + e.at("dur").get<double>());
  }
  return out;
}

double overlap(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  double total = 0;
  for (const auto& x : a)
    for (const auto& y : b) total += std::max(0.0, std::min(x.second, y.second) - std::max(x.first, y.first));
  return total;
}

TEST(GpuTrace, ComputeCommAndCopiesRunOnTheirOwnStreamsAndOverlap) {
  TROUPE_SKIP_WITHOUT_GPU();
  std::string dir = testing::make_temp_dir();
  Outcome gpu =
      train(" --set cluster.device=cuda",
            " --set offload.optimizer=cpu --set zero.reduce_bucket_size=16384 --set trace.path=" + dir +
                "/trace.json",
            dir);
  TROUPE_SKIP_WITHOUT_TORCH_CUDA(gpu);
  ASSERT_TRUE(gpu.ok) << gpu.output;
  auto json = nlohmann::json::parse(testing::read_file(dir + "/trace.json"), nullptr, false);
  ASSERT_FALSE(json.is_discarded());
  auto tracks = spans_by_track(json, "gpu ");
  for (const char* track : {"gpu compute", "gpu comm", "gpu d2h", "gpu h2d"})
    EXPECT_FALSE(tracks[track].empty()) << "no spans on " << track;
  EXPECT_GT(overlap(tracks["gpu comm"], tracks["gpu compute"]), 0)
      << "gradient rows are all-reduced while backward still runs";
}

// On the GPU the ledger's device share is what cudaMalloc'd buffers hold: the run's
// device_bytes (one rank on the GPU, ZeRO 0-3 over 2 ranks sharing it) within 5% of
// `troupe estimate`'s for the same job on device = "cuda" (stage 3: plus its live window).
TEST(GpuMemory, DeviceBytesMatchTheEstimate) {
  TROUPE_SKIP_WITHOUT_GPU();
  for (int stage : {0, 1, 2, 3}) {
    const std::string flags =
        " --set train.steps=3 --set cluster.world_size=2 --set parallel.dp=2 --set cluster.share_gpus=true"
        " --set batch.micro_batch_size=4 --set batch.gradient_accumulation_steps=1"
        " --set batch.global_batch_size=8 --set model.d_model=128 --set zero.reduce_bucket_size=65536"
        " --set zero.param_persistence_threshold=1000 --set zero.max_reuse_distance=0"
        " --set zero.max_live_parameters=210000 --set cluster.device=cuda --set zero.stage=" +
        std::to_string(stage);
    const std::string dir = testing::make_temp_dir();
    auto run = testing::run_command(
        std::string(TROUPE_BINARY) + " run " + TROUPE_SOURCE_DIR + "/configs/tiny-gpt.toml" + flags +
            " --set cluster.coordinator=" + testing::free_coordinator() + " --metrics " + dir + "/m.jsonl",
        300);
    if (run.output.find("has no CUDA") != std::string::npos) GTEST_SKIP() << run.output;
    ASSERT_EQ(run.exit_code, 0) << run.output;
    int64_t measured = 0;
    std::istringstream lines(testing::read_file(dir + "/m.jsonl"));
    for (std::string line; std::getline(lines, line);)
      if (!line.empty())
        measured = std::max<int64_t>(measured, nlohmann::json::parse(line).at("device_bytes"));
    auto e = testing::run_command(std::string(TROUPE_BINARY) + " estimate " + TROUPE_SOURCE_DIR +
                                  "/configs/tiny-gpt.toml" + flags + " --json");
    ASSERT_EQ(e.exit_code, 0) << e.output;
    const auto j = nlohmann::json::parse(e.output);
    const int64_t estimated = j.at("device_bytes");
    const int64_t window = stage == 3 ? 4 * j.at("live_window_elements").get<int64_t>() : 0;
    EXPECT_GE(static_cast<double>(measured), 0.95 * static_cast<double>(estimated)) << "stage " << stage;
    EXPECT_LE(static_cast<double>(measured), 1.05 * static_cast<double>(estimated + window))
        << "stage " << stage;
    std::printf("gpu memory: ZeRO %d: measured %lld B on the device, estimated %lld B\n", stage,
                static_cast<long long>(measured), static_cast<long long>(estimated));
  }
}

}  // namespace
}  // namespace troupe
