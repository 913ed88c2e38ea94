// Pipeline parity: the GPT cut into 2 or 4 stages, each stage a rank (or a data-parallel
// group of ranks under ZeRO stages 0-3) exchanging activations and their gradients over
// real processes and UCX, trains step for step like plain single-process LibTorch
// (`troupe run --reference`) on the same global batches: losses within 1e-5 relative,
// gradient norms within 1e-4, final parameters (laid end to end from every stage) within
// 1e-5 of their norm. Both schedules, 4 and 8 micro-batches, every partition method, both
// rank orders, with and without global clipping.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
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

using testing::TrainedRun;

using Job = testing::PipelineJob;

class PipelineParity : public ::testing::TestWithParam<Job> {};

TEST_P(PipelineParity, LossesNormsAndParametersMatchTheReference) {
  testing::expect_pipeline_parity(GetParam());
}

std::vector<Job> jobs() {
  const std::string by_parameters = " --set pipeline.partition=\\\"parameters\\\"";
  const std::string profiled = " --set pipeline.partition=\\\"profile\\\"";
  const std::string explicit_cut = " --set pipeline.partition=[3,1]";
  const std::string uniform = " --set pipeline.partition=\\\"uniform\\\"";
  const std::string dp_fastest = " --set parallel.order=\\\"dp,pp\\\"";
  return {
      // One replica: both schedules, 4 and 8 micro-batches, 2 and 4 stages.
      Job{2, 1, 4, "1f1b", 0, 0, ""},
      Job{2, 1, 8, "gpipe", 0, 0, by_parameters},
      Job{2, 1, 8, "1f1b", 0, 0, profiled},
      Job{2, 1, 4, "gpipe", 0, 0, explicit_cut},
      Job{4, 1, 8, "1f1b", 0, 0, ""},
      Job{4, 1, 4, "gpipe", 0, 0, uniform},
      // Two replicas of each stage: ZeRO over the stage's group, clipping over the world.
      Job{2, 2, 4, "1f1b", 0, 0.5, ""},
      Job{2, 2, 8, "gpipe", 1, 0, dp_fastest},
      Job{2, 2, 4, "1f1b", 2, 0.5, dp_fastest},
      Job{2, 2, 8, "1f1b", 2, 0, ""},
      Job{4, 2, 4, "1f1b", 1, 0.5, ""},
      // Stage 3: each forward and each backward gathers the stage's rows over its group.
      Job{2, 2, 4, "1f1b", 3, 0.5, ""},
      Job{2, 2, 8, "gpipe", 3, 0, dp_fastest},
      // The embedding tied to the head on the last stage: both stages hold it, their
      // gradients are summed between them, and rank 0 checks the copies agree to the bit.
      Job{2, 1, 4, "1f1b", 0, 0, "", true},
      Job{4, 1, 8, "gpipe", 0, 0.5, "", true},
      Job{2, 2, 4, "1f1b", 1, 0.5, "", true},
      Job{2, 2, 8, "gpipe", 2, 0, dp_fastest, true},
      Job{2, 2, 4, "1f1b", 3, 0.5, "", true},
  };
}

INSTANTIATE_TEST_SUITE_P(Stages, PipelineParity, ::testing::ValuesIn(jobs()),
                         [](const auto& info) { return testing::test_name(info.param); });

// Metrics lines of a short pipelined run (rank 0 = stage 0 writes them).
std::vector<nlohmann::json> metrics_of(const std::string& settings) {
  std::string dir = testing::make_temp_dir();
  std::string command = std::string(TROUPE_BINARY) + " run " + TROUPE_SOURCE_DIR + "/configs/tiny-gpt.toml" +
                        " --set train.steps=3 --set cluster.world_size=2 --set parallel.dp=1 --set parallel.pp=2" +
                        " --set batch.micro_batch_size=2 --set batch.gradient_accumulation_steps=8" +
                        " --set batch.global_batch_size=16" + settings +
                        " --set cluster.coordinator=" + testing::free_coordinator() + " --metrics " + dir +
                        "/metrics.jsonl";
  auto r = testing::run_command(command, 300);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<nlohmann::json> lines;
  std::istringstream in(testing::read_file(dir + "/metrics.jsonl"));
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// Stage 0 (embedding and first block, 4 layers cut in 2) keeps each micro-batch's input
// tokens (2 × 64 int64) and output activations (2 × 64 × 64 float32) from its forward to
// its backward: 1f1b holds at most pp = 2 micro-batches at once, gpipe all m = 8; with
// checkpointing only the input is kept. Measured by the ledger's activations peak.
TEST(PipelineMemory, StageZeroHoldsPpMicroBatchesWithOneFOneBAndAllWithGPipe) {
  const int64_t input = 2 * 64 * 8, output = 2 * 64 * 64 * 4;
  auto one_f_one_b = metrics_of(" --set pipeline.schedule=1f1b");
  auto gpipe = metrics_of(" --set pipeline.schedule=gpipe");
  auto checkpointed = metrics_of(" --set pipeline.schedule=1f1b --set model.activation_checkpointing=true");
  ASSERT_EQ(one_f_one_b.size(), 3u);
  ASSERT_EQ(gpipe.size(), 3u);
  ASSERT_EQ(checkpointed.size(), 3u);
  for (std::size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(one_f_one_b[s].at("activation_bytes"), 2 * (input + output)) << "step " << s + 1;
    EXPECT_EQ(gpipe[s].at("activation_bytes"), 8 * (input + output)) << "step " << s + 1;
    EXPECT_EQ(checkpointed[s].at("activation_bytes"), 2 * input) << "step " << s + 1;
  }
}

// Recomputing a stage's forward in backward gives the same losses, bit for bit, and the
// same gradient norms: a pipeline, a plain data-parallel job, and a pipeline whose stages
// gather their parameters for each forward, recomputed forward and backward (ZeRO 3).
TEST(ActivationCheckpointing, GivesTheSameLossesBitForBit) {
  for (const std::string& shape :
       {std::string(" --set pipeline.schedule=1f1b"),
        std::string(" --set parallel.pp=1 --set parallel.dp=2 --set zero.stage=2"
                    " --set batch.micro_batch_size=1"),
        std::string(" --set parallel.dp=2 --set cluster.world_size=4 --set zero.stage=3"
                    " --set batch.micro_batch_size=1")}) {
    auto off = metrics_of(shape);
    auto on = metrics_of(shape + " --set model.activation_checkpointing=true");
    ASSERT_EQ(off.size(), 3u);
    ASSERT_EQ(on.size(), off.size());
    for (std::size_t s = 0; s < off.size(); ++s) {
      EXPECT_EQ(on[s].at("loss").get<double>(), off[s].at("loss").get<double>()) << shape << " step " << s + 1;
      EXPECT_EQ(on[s].at("grad_norm").get<double>(), off[s].at("grad_norm").get<double>()) << shape;
    }
  }
}

}  // namespace
}  // namespace troupe
