// Tensor parallelism held to the single-process reference: the tiny GPT split over tp ranks
// (heads, MLP width and vocabulary), alone and with data parallelism, ZeRO, the cpu
// offload tier and a pipeline (the seed's tp 2 × pp 2 × dp 2), with and without sequence
// parallelism, over real processes and UCX: 20
// steps of fp32 with losses within 1e-5 relative and final parameters within 1e-5 of
// their norm. Bad settings are refused naming the file, line and key.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"
#include "tests/support/parity.hpp"
#include "tests/support/trained_run.hpp"

namespace troupe::testing {
namespace {

struct TpJob {
  int tp = 2;
  int pp = 1;
  int dp = 1;
  int zero = 0;
  bool sequence = false;
  std::string offload = "none";
  double clip = 0;
  bool device_path = false;  ///< on CPU streams standing in for a GPU's (TROUPE_DEVICE_PATH=cpu)
  int chunks = 1;            ///< > 1: virtual stages (interleaved 1F1B)
  bool profiled = false;     ///< the pipeline cut from timing the layers (partition = "profile")
  bool tied = true;          ///< the embedding tied to the head
};

// Virtual stages refuse weights tied across stages: the embeddings untied.
TpJob with_chunks(TpJob j, int chunks) {
  j.chunks = chunks;
  j.tied = false;
  return j;
}
TpJob profiled(TpJob j) {
  j.profiled = true;
  return j;
}

std::string describe(const TpJob& j) {
  return "tp " + std::to_string(j.tp) + " × pp " + std::to_string(j.pp) + " × dp " + std::to_string(j.dp) +
         ", zero " + std::to_string(j.zero) + (j.sequence ? ", sequence parallel" : "") +
         (j.offload != "none" ? ", optimizer on " + j.offload : "") + (j.clip > 0 ? ", clipping" : "") +
         (j.device_path ? ", the device path" : "") +
         (j.chunks > 1 ? ", " + std::to_string(j.chunks) + " chunks per rank" : "") +
         (j.profiled ? ", the cut profiled" : "");
}

// 20 steps of configs/tiny-gpt.toml (4 heads, vocabulary 256, sequence 64) on a global
// batch of 8, tied embeddings (untied with virtual stages, which refuse ties), as `troupe
// run` overrides.
std::string overrides(const TpJob& j) {
  const std::vector<std::string> sets = {
      "train.steps=20",
      "optimizer.lr=1e-3",
      "cluster.world_size=" + std::to_string(j.tp * j.pp * j.dp),
      "parallel.dp=" + std::to_string(j.dp),
      "parallel.pp=" + std::to_string(j.pp),
      "parallel.tp=" + std::to_string(j.tp),
      std::string("parallel.sequence_parallel=") + (j.sequence ? "true" : "false"),
      "batch.micro_batch_size=" + std::to_string(8 / j.dp / 2),
      "batch.gradient_accumulation_steps=2",
      "zero.stage=" + std::to_string(j.zero),
      "zero.reduce_bucket_size=16384",
      "offload.optimizer=\\\"" + j.offload + "\\\"",
      "optimizer.gradient_clipping=" + std::to_string(j.clip),
      std::string("model.tie_embeddings=") + (j.tied ? "true" : "false"),
      "cluster.coordinator=" + free_coordinator()};
  std::string out;
  for (const auto& s : sets) out += " --set " + s;
  // Stage 3 with layer rows: the tiny GPT's tensors are all below the default persistence
  // threshold, which would keep every one gathered.
  if (j.zero == 3) out += " --set zero.param_persistence_threshold=1000";
  if (j.chunks > 1)
    out += " --set pipeline.schedule=\\\"interleaved_1f1b\\\" --set pipeline.virtual_stages=" +
           std::to_string(j.chunks);
  if (j.profiled) out += " --set pipeline.partition=\\\"profile\\\"";
  // The nvme tier holds the optimizer state and, at stage 3, the parameters.
  if (j.offload == "nvme")
    out += " --set offload.nvme_path=" + make_temp_dir() + (j.zero == 3 ? " --set offload.param=nvme" : "");
  return out;
}

TrainedRun train(const std::string& how, const TpJob& j) {
  std::string dir = make_temp_dir();
  auto r = run_command(std::string(j.device_path ? "TROUPE_DEVICE_PATH=cpu " : "") + TROUPE_BINARY + " run " +
                           TROUPE_SOURCE_DIR + "/configs/tiny-gpt.toml" + how + overrides(j) + " --metrics " +
                           dir + "/metrics.jsonl --parameters-out " + dir + "/parameters.bin",
                       300);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return read_run(dir + "/metrics.jsonl", dir + "/parameters.bin");
}

// The single process on `j`'s model (tied or not) and clipping.
const TrainedRun& reference(const TpJob& j) {
  static std::map<std::pair<double, bool>, TrainedRun> cache;
  const auto key = std::make_pair(j.clip, j.tied);
  auto found = cache.find(key);
  if (found == cache.end()) {
    TpJob single{1, 1, 1, 0, false, "none", j.clip};
    single.tied = j.tied;
    found = cache.emplace(key, train(" --reference", single)).first;
  }
  return found->second;
}

class TensorParallel : public ::testing::TestWithParam<TpJob> {};

TEST_P(TensorParallel, TrainsAsTheSingleProcessReference) {
  const TpJob j = GetParam();
  TrainedRun run = train("", j);
  ParityFigures worst = expect_parity(run, reference(j), 20, j.clip);
  std::printf(
      "tensor-parallel parity: %s: worst loss %.2e relative, gradient norm %.2e, parameters %.2e of their "
      "norm\n",
      describe(j).c_str(), worst.loss, worst.grad_norm, worst.parameters);
}

std::string name(const ::testing::TestParamInfo<TpJob>& info) {
  const TpJob& j = info.param;
  std::string n = "tp" + std::to_string(j.tp) + (j.pp > 1 ? "_pp" + std::to_string(j.pp) : "") + "_dp" +
                  std::to_string(j.dp) + "_zero" + std::to_string(j.zero);
  if (j.sequence) n += "_sequence";
  if (j.offload != "none") n += "_" + j.offload;
  if (j.clip > 0) n += "_clip";
  if (j.device_path) n += "_devicePath";
  if (j.chunks > 1) n += "_chunks" + std::to_string(j.chunks);
  if (j.profiled) n += "_profiled";
  return n;
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, TensorParallel,
    ::testing::Values(TpJob{2, 1, 1, 0, false, "none", 0}, TpJob{2, 1, 1, 0, true, "none", 1.0},
                      TpJob{4, 1, 1, 0, false, "none", 1.0}, TpJob{4, 1, 1, 0, true, "none", 0},
                      TpJob{2, 1, 2, 1, false, "none", 1.0}, TpJob{2, 1, 2, 3, true, "none", 0},
                      TpJob{2, 1, 2, 3, false, "cpu", 1.0}, TpJob{2, 1, 2, 2, true, "none", 1.0},
                      TpJob{2, 1, 2, 3, false, "nvme", 0},
                      // the seed's layout: tp 2 × pp 2 × dp 2, ZeRO 3, the optimizer on the cpu
                      // tier, 8 processes
                      TpJob{2, 2, 2, 3, false, "cpu", 1.0}, TpJob{2, 2, 2, 3, true, "cpu", 0},
                      // virtual stages under ZeRO 2-3, each chunk computing on its own stream
                      // with a communicator of its own for its group
                      with_chunks(TpJob{2, 2, 2, 3, true, "none", 0}, 2),
                      with_chunks(TpJob{2, 2, 1, 2, false, "none", 1.0}, 2),
                      // the cut from the layers timed by rank 0's group together
                      profiled(TpJob{2, 2, 1, 1, true, "none", 0})),
    name);

// The device path (a GPU rank's, on CPU streams): the layers' collectives staged through
// host memory inside forward and backward, each data-parallel group's rows on its own
// communicator through the device collectives.
INSTANTIATE_TEST_SUITE_P(DevicePath, TensorParallel,
                         ::testing::Values(TpJob{2, 1, 2, 1, false, "none", 1.0, true},
                                           TpJob{2, 1, 2, 3, true, "none", 0, true},
                                           TpJob{2, 1, 2, 2, false, "cpu", 0, true},
                                           TpJob{2, 2, 2, 3, false, "cpu", 1.0, true},
                                           with_chunks(TpJob{2, 2, 1, 3, true, "none", 0, true}, 2)),
                         name);

// What rank 0 sends per step (the transport's payload counter, the metrics' sent_bytes),
// each step alike: the median over the run.
int64_t bytes_per_step(int layers, bool sequence) {
  const std::string dir = make_temp_dir();
  const std::string sets =
      " --set train.steps=4 --set cluster.world_size=2 --set parallel.dp=1 --set parallel.tp=2"
      " --set parallel.sequence_parallel=" +
      std::string(sequence ? "true" : "false") + " --set model.n_layers=" + std::to_string(layers) +
      " --set batch.micro_batch_size=4 --set batch.gradient_accumulation_steps=2"
      " --set cluster.coordinator=" +
      free_coordinator();
  auto r = run_command(std::string(TROUPE_BINARY) + " run " + TROUPE_SOURCE_DIR + "/configs/tiny-gpt.toml" +
                           sets + " --metrics " + dir + "/metrics.jsonl",
                       300);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(dir + "/metrics.jsonl");
  std::vector<int64_t> sent;
  for (std::string line; std::getline(in, line);)
    sent.push_back(nlohmann::json::parse(line).at("sent_bytes"));
  EXPECT_EQ(sent.size(), 4u);
  for (int64_t s : sent) EXPECT_EQ(s, sent.front()) << "every step sends the same bytes";
  return sent.empty() ? 0 : sent.front();
}

// A transformer layer's tensor-parallel traffic per rank and step, as the transport
// counts it: the difference between a 3-layer and a 1-layer GPT, halved, so the
// embedding, the head, the loss and the norm cancel. Megatron (Korthikanti et al. 2022,
// section 4.2.2): per layer and micro-batch, 4 all-reduces of b·s·h elements forward and
// backward, each moving 2(t−1)/t of them from each rank; under sequence parallelism 4
// all-gathers and 4 reduce-scatters moving (t−1)/t each: the same volume. troupe adds,
// under sequence parallelism, the sum of the layer's replicated gradients over the group
// (its two LayerNorms' weights and biases and two row-parallel biases: 6h) in each
// micro-batch's backward, where Megatron sums them once per step.
TEST(TensorParallelVolume, EachLayerSendsWhatMegatronsFormulaSays) {
  const int64_t t = 2, b = 4, s = 64, h = 64, m = 2, fp32 = 4;
  for (bool sequence : {false, true}) {
    const int64_t per_layer = (bytes_per_step(3, sequence) - bytes_per_step(1, sequence)) / 2;
    int64_t megatron = m * 4 * 2 * (t - 1) * b * s * h / t * fp32;
    if (sequence) megatron = m * (4 + 4) * (t - 1) * b * s * h / t * fp32;
    const int64_t replicated = sequence ? m * 2 * (t - 1) * 6 * h / t * fp32 : 0;
    EXPECT_EQ(per_layer, megatron + replicated) << (sequence ? "sequence parallel" : "tensor parallel");
    std::printf(
        "tensor-parallel volume%s: %lld bytes per layer and step from each rank; Megatron's formula %lld "
        "(+ %lld for the replicated gradients)\n",
        sequence ? " (sequence parallel)" : "", static_cast<long long>(per_layer),
        static_cast<long long>(megatron), static_cast<long long>(replicated));
  }
}

// Two ranks, each told it is alone on its host (TROUPE_LOCAL_WORLD_SIZE=1), with tp = 2:
// the group spans hosts, which is allowed and said once, with the reason; the job trains.
TEST(TensorParallelBadInput, AGroupWiderThanAHostIsWarnedAbout) {
  const std::string dir = make_temp_dir();
  const std::string sets =
      " --set train.steps=2 --set cluster.world_size=2 --set parallel.dp=1 --set parallel.tp=2"
      " --set batch.micro_batch_size=2 --set cluster.coordinator=" +
      free_coordinator();
  auto rank = [&](int r) {
    return "TROUPE_TOKEN=tp-test TROUPE_RANK=" + std::to_string(r) +
           " TROUPE_WORLD_SIZE=2 TROUPE_LOCAL_RANK=0 TROUPE_LOCAL_WORLD_SIZE=1 " + TROUPE_BINARY + " rank " +
           TROUPE_SOURCE_DIR + "/configs/tiny-gpt.toml" + sets;
  };
  auto r = run_command("(" + rank(0) + " & first=$!; " + rank(1) + " > /dev/null 2>&1; wait $first)", 300);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(
      r.output.find("[parallel] tp = 2 is more than the 1 ranks on this host: a tensor-parallel group then "
                    "spans hosts"),
      std::string::npos)
      << r.output;
}

// `troupe estimate` plans a rank's shard.
TEST(TensorParallelEstimate, CountsAShard) {
  auto e = run_command(
      std::string(TROUPE_BINARY) + " estimate " + TROUPE_SOURCE_DIR +
          "/configs/tiny-gpt.toml --set cluster.world_size=4 --set parallel.dp=2 --set parallel.tp=2",
      60);
  EXPECT_EQ(e.exit_code, 0) << e.output;
  EXPECT_NE(e.output.find("ZeRO stage 0, dp 2, tp 2, 136,960 parameters, 70,976 on each rank"),
            std::string::npos)
      << e.output;
}

// `troupe check` on a job of tp ranks with `model` and `parallel` lines added: refused
// naming the file, the line of the key and what must divide what.
void expect_refused(int tp, const std::string& parallel, const std::string& model, int line,
                    const std::string& needle) {
  const std::string dir = make_temp_dir();
  const std::string file = dir + "/job.toml";
  write_file(file, "[cluster]\nworld_size = " + std::to_string(tp) +
                       "\n[batch]\nmicro_batch_size = 1\n[parallel]\ntp = " + std::to_string(tp) + "\n" +
                       parallel + "[model]\n" + model);
  auto r = run_command(std::string(TROUPE_BINARY) + " check " + file, 60);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.exit_code, 128) << "crashed: " << r.output;
  EXPECT_NE(r.output.find(file + ":" + std::to_string(line) + ":"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << "missing \"" << needle << "\" in: " << r.output;
}

TEST(TensorParallelBadInput, WhatDoesNotSplitEvenlyIsRefusedNamingTheKey) {
  expect_refused(3, "", "n_heads = 4\n", 8, "[model] n_heads = 4 is not divisible by [parallel] tp = 3");
  expect_refused(4, "", "d_ff = 66\n", 8, "[model] d_ff = 66 is not divisible by [parallel] tp = 4");
  expect_refused(4, "", "vocab_size = 258\n", 8,
                 "[model] vocab_size = 258 is not divisible by [parallel] tp = 4");
  expect_refused(2, "sequence_parallel = true\n", "seq_len = 63\n", 9,
                 "[model] seq_len = 63 is not divisible by [parallel] tp = 2: sequence_parallel");
  expect_refused(1, "sequence_parallel = true\n", "", 7, "sequence_parallel = true needs tp > 1");
}

}  // namespace
}  // namespace troupe::testing
