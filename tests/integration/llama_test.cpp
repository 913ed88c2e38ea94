// The LLaMA family (configs/tiny-llama.toml: RMSNorm, rotary embeddings, SwiGLU, 4 query
// heads over 2 key/value heads, vocabulary 320) held to the single-process reference over
// real processes and UCX: data parallelism under every ZeRO stage, 1F1B and zero-bubble
// (zbv) pipelines with data parallelism, recomputed activations, stage 3's parameters on
// NVMe, tensor parallelism with sequence parallelism, and the 3D layout tp 2 × pp 2 × dp 2
// with ZeRO 3 and the optimizer on the cpu tier; 20 steps of fp32, losses within 1e-5
// relative and final parameters within 1e-5 of their norm. bf16 and checkpoints of the
// family are in precision_test and checkpoint_test. The device path (a GPU rank's, on CPU
// streams) trains it too: ZeRO 3, and tp 2 × dp 2 with sequence parallelism.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"
#include "tests/support/parity.hpp"
#include "tests/support/trained_run.hpp"

namespace troupe::testing {
namespace {

struct LlamaJob {
  int dp = 2;
  int pp = 1;
  int tp = 1;
  int zero = 0;
  bool sequence = false;
  std::string offload = "none";
  bool tied = false;
  std::string schedule = "1f1b";
  std::string settings = "";  ///< more --set flags
  bool device_path = false;   ///< on CPU streams standing in for a GPU's (TROUPE_DEVICE_PATH=cpu)
};

std::string name(const ::testing::TestParamInfo<LlamaJob>& info) {
  const LlamaJob& j = info.param;
  std::string n = "dp" + std::to_string(j.dp) + (j.pp > 1 ? "_pp" + std::to_string(j.pp) : "") +
                  (j.tp > 1 ? "_tp" + std::to_string(j.tp) : "") + "_zero" + std::to_string(j.zero);
  if (j.sequence) n += "_sequence";
  if (j.offload != "none") n += "_" + j.offload;
  if (j.tied) n += "_tied";
  if (j.pp > 1) n += "_" + j.schedule;
  if (j.settings.find("checkpointing") != std::string::npos) n += "_recomputed";
  if (j.settings.find("param") != std::string::npos) n += "_parametersOnNvme";
  if (j.device_path) n += "_devicePath";
  return n;
}

// 20 steps on a global batch of 8 (micro-batches of 8 / dp / 2, accumulated twice).
std::string overrides(const LlamaJob& j) {
  const std::vector<std::string> sets = {
      "train.steps=20",
      "optimizer.lr=1e-3",
      "cluster.world_size=" + std::to_string(j.tp * j.pp * j.dp),
      "parallel.dp=" + std::to_string(j.dp),
      "parallel.pp=" + std::to_string(j.pp),
      "parallel.tp=" + std::to_string(j.tp),
      std::string("parallel.sequence_parallel=") + (j.sequence ? "true" : "false"),
      "pipeline.schedule=\\\"" + j.schedule + "\\\"",
      "batch.micro_batch_size=" + std::to_string(8 / j.dp / 2),
      "batch.gradient_accumulation_steps=2",
      "zero.stage=" + std::to_string(j.zero),
      "zero.reduce_bucket_size=16384",
      "offload.optimizer=\\\"" + j.offload + "\\\"",
      std::string("model.tie_embeddings=") + (j.tied ? "true" : "false"),
      "cluster.coordinator=" + free_coordinator()};
  std::string out;
  for (const auto& s : sets) out += " --set " + s;
  if (j.zero == 3) out += " --set zero.param_persistence_threshold=1000";  // rows, not all persistent
  if (j.offload == "nvme") out += " --set offload.nvme_path=" + make_temp_dir();
  return out + j.settings;
}

TrainedRun train(const std::string& how, const LlamaJob& j) {
  const std::string dir = make_temp_dir();
  auto r = run_command(std::string(j.device_path ? "TROUPE_DEVICE_PATH=cpu " : "") + TROUPE_BINARY + " run " +
                           TROUPE_SOURCE_DIR + "/configs/tiny-llama.toml" + how + overrides(j) +
                           " --metrics " + dir + "/metrics.jsonl --parameters-out " + dir + "/parameters.bin",
                       300);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return read_run(dir + "/metrics.jsonl", dir + "/parameters.bin");
}

const TrainedRun& reference(bool tied) {
  static TrainedRun cache[2];
  static bool made[2] = {false, false};
  if (!made[tied]) {
    LlamaJob one{1, 1, 1, 0, false, "none", tied};
    cache[tied] = train(" --reference", one);
    made[tied] = true;
  }
  return cache[tied];
}

class Llama : public ::testing::TestWithParam<LlamaJob> {};

TEST_P(Llama, TrainsAsTheSingleProcessReference) {
  const LlamaJob j = GetParam();
  const TrainedRun run = train("", j);
  const ParityFigures worst = expect_parity(run, reference(j.tied), 20);
  std::printf(
      "llama parity: %s: worst loss %.2e relative, gradient norm %.2e, parameters %.2e of their norm\n",
      name(::testing::TestParamInfo<LlamaJob>(j, 0)).c_str(), worst.loss, worst.grad_norm, worst.parameters);
}

INSTANTIATE_TEST_SUITE_P(Layouts, Llama,
                         ::testing::Values(LlamaJob{2, 1, 1, 0}, LlamaJob{2, 1, 1, 1},
                                           LlamaJob{2, 1, 1, 2, false, "none", true}, LlamaJob{2, 1, 1, 3},
                                           LlamaJob{2, 2, 1, 1}, LlamaJob{2, 1, 2, 2, true},
                                           LlamaJob{2, 2, 2, 3, false, "cpu"},
                                           // zero bubble over a V of virtual stages; recomputed
                                           // activations; stage 3's parameters swapped from NVMe
                                           LlamaJob{2, 2, 1, 1, false, "none", false, "zbv"},
                                           LlamaJob{2, 2, 1, 2, false, "none", false, "1f1b",
                                                    " --set model.activation_checkpointing=true"},
                                           LlamaJob{2, 1, 1, 3, false, "nvme", false, "1f1b",
                                                    " --set offload.param=\\\"nvme\\\""}),
                         name);

// Tensor parallelism with virtual stages: tp 2 × pp 2 of two chunks each (interleaved 1F1B,
// 4 layers) × dp 2, against the reference of the same 4-layer model.
TEST(LlamaVirtualStages, TensorParallelChunksTrainAsTheReference) {
  const std::string four = " --set model.n_layers=4";
  LlamaJob one{1, 1, 1, 0, false, "none", false, "1f1b", four};
  LlamaJob split{2, 2, 2, 1, false, "none", false, "interleaved_1f1b", four};
  const TrainedRun ref = train(" --reference", one);
  const TrainedRun run = train("", split);
  const ParityFigures worst = expect_parity(run, ref, 20);
  std::printf(
      "llama parity: tp2 x pp2 (2 chunks each, interleaved_1f1b) x dp2: worst loss %.2e relative, "
      "parameters %.2e of their norm\n",
      worst.loss, worst.parameters);
}

// A GPU rank's path (its rows, buckets and collectives by placement), on CPU streams standing
// in for the device's: ZeRO 3 at dp 2, and tp 2 × dp 2 with sequence parallelism.
INSTANTIATE_TEST_SUITE_P(DevicePath, Llama,
                         ::testing::Values(LlamaJob{2, 1, 1, 3, false, "none", false, "1f1b", "", true},
                                           LlamaJob{2, 1, 2, 2, true, "none", false, "1f1b", "", true}),
                         name);

}  // namespace
}  // namespace troupe::testing
