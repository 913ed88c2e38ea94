// A model whose layers share a weight, with parameters no forward pass uses, trained by an
// outside trainer through the public API (tests/integration/shared_weights_rank.cpp) on 2
// ranks, against a plain LibTorch loop on the same global batches: at every ZeRO stage,
// offload tier and accumulation, every step's loss within 1e-5 relative, the final
// parameters (the shared tensor once) within 1e-5 of their norm, the unused parameters
// bit-identical to their initial values. And every step's token count, on every rank,
// while two jobs load the machine at once.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"
#include "tests/support/trained_run.hpp"

namespace troupe {
namespace {

struct Job {
  int stage = 0;
  std::string offload = "none";
  int accumulation = 1;
};

void PrintTo(const Job& j, std::ostream* out) {
  *out << "stage " << j.stage << ", offload " << j.offload << ", accumulation " << j.accumulation;
}

struct JobRun {
  testing::CommandResult command;
  std::vector<double> losses;
  std::map<std::string, std::pair<std::size_t, std::size_t>> tensors;  // name -> offset, count
  std::vector<float> initial, parameters;
};

std::vector<float> read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  std::vector<float> values(in ? static_cast<std::size_t>(in.tellg()) / sizeof(float) : 0);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(values.data()),
          static_cast<std::streamsize>(values.size() * sizeof(float)));
  return values;
}

// "loss STEP VALUE" and "tensor NAME OFFSET COUNT" lines, whatever prefixes them.
void parse(JobRun& run) {
  run.losses = testing::printed_losses(run.command.output);
  std::istringstream in(run.command.output);
  for (std::string line; std::getline(in, line);) {
    if (auto t = line.find("tensor "); t != std::string::npos) {
      std::istringstream fields(line.substr(t + 7));
      std::string name;
      std::size_t offset = 0, count = 0;
      if (fields >> name >> offset >> count) run.tensors[name] = {offset, count};
    }
  }
}

std::string settings(const Job& j, const std::string& dir) {
  int micro = 12 / 2 / j.accumulation;
  std::string s = " cluster.world_size=2 parallel.dp=2 batch.global_batch_size=12 batch.micro_batch_size=" +
                  std::to_string(micro) +
                  " batch.gradient_accumulation_steps=" + std::to_string(j.accumulation) +
                  " zero.stage=" + std::to_string(j.stage) +
                  " zero.reduce_bucket_size=300 zero.param_persistence_threshold=100"
                  " zero.prefetch_bucket_size=600 offload.optimizer=" +
                  j.offload;
  if (j.offload == "nvme") s += " offload.nvme_path=" + dir;
  if (j.offload == "nvme" && j.stage == 3) s += " offload.param=nvme";  // the swapped rows too
  return s;
}

// Each run (the reference too) is given a free coordinator port of its own.
JobRun run(const std::string& mode, const Job& j) {
  JobRun r;
  std::string dir = testing::make_temp_dir();
  std::string program = std::string(SHARED_WEIGHTS_RANK_BINARY) + " " + mode + " " +
                        std::to_string(testing::free_port()) + " " + dir + settings(j, dir);
  if (mode == "troupe") program = std::string(TROUPE_BINARY) + " launch --ranks 2 -- " + program;
  r.command = testing::run_command(program, 180);
  parse(r);
  r.initial = read_floats(dir + "/initial.bin");
  r.parameters = read_floats(dir + "/parameters.bin");
  return r;
}

const JobRun& reference() {
  static const JobRun r = run("reference", Job{});
  return r;
}

bool bit_identical(const JobRun& r, const std::string& tensor) {
  auto [offset, count] = r.tensors.at(tensor);
  if (r.initial.size() < offset + count || r.parameters.size() < offset + count) return false;
  return std::memcmp(r.initial.data() + offset, r.parameters.data() + offset, count * sizeof(float)) == 0;
}

class SharedWeights : public ::testing::TestWithParam<Job> {};

TEST_P(SharedWeights, TrainLikeOneLibTorchProcess) {
  const Job j = GetParam();
  const JobRun& ref = reference();
  ASSERT_EQ(ref.command.exit_code, 0) << ref.command.output;
  // The model's distinct tensors: 32×8 + 32 (layer 0; layer 4 uses the weight too),
  // 32×32 + 32, 8 (layer 4's bias), 4×8 + 4 (the head; its weight registered twice), 300
  // + 5 (unused): each once.
  ASSERT_EQ(ref.tensors.size(), 9u);
  ASSERT_EQ(ref.parameters.size(), 256u + 32 + 1024 + 32 + 8 + 32 + 4 + 300 + 5);
  ASSERT_TRUE(bit_identical(ref, "6.spare") && bit_identical(ref, "6.spare_small"))
      << "LibTorch's AdamW skips parameters without a gradient";
  ASSERT_FALSE(bit_identical(ref, "0.weight"));

  JobRun got = run("troupe", j);
  ASSERT_EQ(got.command.exit_code, 0) << got.command.output;
  ASSERT_EQ(got.losses.size(), 25u) << got.command.output;
  ASSERT_EQ(ref.losses.size(), 25u);
  double worst = 0;
  for (std::size_t s = 0; s < 25; ++s) {
    double relative = std::abs(got.losses[s] - ref.losses[s]) / std::abs(ref.losses[s]);
    EXPECT_LT(relative, 1e-5) << "step " << s + 1 << ": " << got.losses[s] << " vs " << ref.losses[s];
    worst = std::max(worst, relative);
  }
  EXPECT_EQ(got.tensors, ref.tensors);
  ASSERT_EQ(got.parameters.size(), ref.parameters.size());
  double distance = testing::parameter_distance(got.parameters, ref.parameters);
  EXPECT_LT(distance, 1e-5);
  EXPECT_TRUE(bit_identical(got, "6.spare")) << "an unused parameter moved";
  EXPECT_TRUE(bit_identical(got, "6.spare_small")) << "an unused parameter moved";
  std::printf(
      "shared weights: stage %d, offload %s, accumulation %d: worst loss difference %.2e relative, "
      "parameters %.2e of their norm, unused parameters bit-identical\n",
      j.stage, j.offload.c_str(), j.accumulation, worst, distance);
}

std::vector<Job> jobs() {
  std::vector<Job> all;
  for (int stage : {0, 1, 2, 3})
    for (const char* offload : {"none", "cpu", "nvme"})
      for (int accumulation : {1, 3}) all.push_back(Job{stage, offload, accumulation});
  return all;
}

INSTANTIATE_TEST_SUITE_P(Zero, SharedWeights, ::testing::ValuesIn(jobs()), [](const auto& info) {
  const Job& j = info.param;
  std::string offload = j.offload == "none" ? "InMemory" : j.offload == "cpu" ? "OffloadCpu" : "OffloadNvme";
  return "Stage" + std::to_string(j.stage) + offload + "Accumulation" + std::to_string(j.accumulation);
});

// Many short steps, two 2-rank jobs at once on this machine: each rank checks every step's
// tokens (micro × accumulation × dp × 4 targets per sample: 48 in both jobs) and stops
// naming the step if not.
TEST(StepTokens, EveryStepCountsEveryMicroBatchOnEveryRankUnderLoad) {
  std::vector<testing::CommandResult> results(2);
  // Taken here, not in the threads: free_port() is not thread-safe.
  const std::vector<int> ports = {testing::free_port(), testing::free_port()};
  std::vector<std::thread> jobs;
  for (int k = 0; k < 2; ++k)
    jobs.emplace_back([k, &results, &ports] {
      Job j{k == 0 ? 0 : 2, "none", k == 0 ? 1 : 3};
      std::string dir = testing::make_temp_dir();
      results[k] = testing::run_command(
          std::string(TROUPE_BINARY) + " launch --ranks 2 -- " + SHARED_WEIGHTS_RANK_BINARY + " troupe " +
              std::to_string(ports[k]) + " " + dir + settings(j, dir) + " train.steps=400",
          300);
    });
  for (auto& t : jobs) t.join();
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(results[k].exit_code, 0) << results[k].output;
    for (int rank = 0; rank < 2; ++rank)
      EXPECT_NE(results[k].output.find("rank " + std::to_string(rank) + ": every step's tokens were 48"),
                std::string::npos)
          << results[k].output;
  }
}

}  // namespace
}  // namespace troupe
