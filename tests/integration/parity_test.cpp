// Parity: data-parallel training under every ZeRO stage, over real processes and UCX,
// gives step for step the losses and gradient norms of plain single-process LibTorch
// (`troupe run --reference`) on the same global batches, and the same final
// parameters (gathered from the partitions); with gradient clipping too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"
#include "tests/support/parity.hpp"
#include "tests/support/trained_run.hpp"

namespace troupe {
namespace {

using testing::TrainedRun;

struct Job {
  int stage = 0;
  int dp = 1;
  int accumulation = 1;
  double clip = 0;
  std::string settings;          ///< more --set flags (optimizer, overlap), the reference's too
  std::string offload = "none";  ///< [offload] optimizer of the troupe run (stage 3 nvme: param too)
};

std::string describe(const Job& j) {
  return "stage " + std::to_string(j.stage) + ", dp " + std::to_string(j.dp) + ", accumulation " +
         std::to_string(j.accumulation) + (j.clip > 0 ? ", clipping" : "") +
         (j.offload != "none" ? ", offload " + j.offload : "") + j.settings;
}

// Trains 20 steps of a small GPT with a global batch of 16 sequences. Stage 3 keeps
// only LayerNorm parameters whole and prefetches at most 20,000 elements ahead. Each run
// (a reference too) is given a free coordinator port of its own.
TrainedRun train(const std::string& how, const Job& j) {
  std::string dir = testing::make_temp_dir();
  int micro = 16 / j.dp / j.accumulation;
  std::string command = std::string(TROUPE_BINARY) + " run " + TROUPE_SOURCE_DIR + "/configs/tiny-gpt.toml" +
                        how + " --set train.steps=20 --set optimizer.lr=1e-3" +
                        " --set cluster.world_size=" + std::to_string(j.dp) +
                        " --set parallel.dp=" + std::to_string(j.dp) +
                        " --set batch.micro_batch_size=" + std::to_string(micro) +
                        " --set batch.gradient_accumulation_steps=" + std::to_string(j.accumulation) +
                        " --set batch.global_batch_size=16" + " --set zero.stage=" + std::to_string(j.stage) +
                        " --set zero.reduce_bucket_size=16384" +  // several gradient rows in flight
                        " --set zero.param_persistence_threshold=100 --set zero.prefetch_bucket_size=20000" +
                        " --set optimizer.gradient_clipping=" + std::to_string(j.clip) + j.settings +
                        " --set offload.optimizer=" + j.offload +
                        (j.offload == "nvme" ? " --set offload.nvme_path=" + dir : "") +
                        (j.offload == "nvme" && j.stage == 3 ? " --set offload.param=nvme" : "") +
                        " --set cluster.coordinator=" + testing::free_coordinator() + " --metrics " + dir +
                        "/metrics.jsonl --parameters-out " + dir + "/parameters.bin";
  auto r = testing::run_command(command, 300);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return testing::read_run(dir + "/metrics.jsonl", dir + "/parameters.bin");
}

// The reference of a job's model and optimizer settings, trained once and shared.
const TrainedRun& reference(const Job& j) {
  static std::map<std::pair<double, std::string>, TrainedRun> cache;
  auto key = std::make_pair(j.clip, j.settings);
  auto found = cache.find(key);
  if (found == cache.end())
    found = cache.emplace(key, train(" --reference", Job{0, 1, 1, j.clip, j.settings})).first;
  return found->second;
}

class Parity : public ::testing::TestWithParam<Job> {};

TEST_P(Parity, LossesAndParametersMatchTheReference) {
  const Job j = GetParam();
  const TrainedRun& ref = reference(j);
  TrainedRun ranks = train("", j);
  testing::ParityFigures worst = testing::expect_parity(ranks, ref, 20, j.clip);
  // Every step's update at the reference's rate (a [scheduler]'s, or the constant one).
  ASSERT_EQ(ranks.lrs.size(), ref.lrs.size());
  for (std::size_t k = 0; k < ref.lrs.size(); ++k)
    EXPECT_NEAR(ranks.lrs[k], ref.lrs[k], 1e-12) << "step " << k + 1;
  // The figures docs/DESIGN.md quotes: `ctest -R parity_test -V` prints them.
  std::printf(
      "parity: %s: worst loss difference %.2e relative, gradient norm %.2e, parameters %.2e of their norm\n",
      describe(j).c_str(), worst.loss, worst.grad_norm, worst.parameters);
}

std::vector<Job> jobs() {
  std::vector<Job> all;
  for (int stage : {0, 1, 2, 3})
    for (int dp : {1, 2, 4})
      for (int accumulation : {1, 4}) all.push_back(Job{stage, dp, accumulation, 0, ""});
  for (int stage : {0, 1, 2, 3}) {
    all.push_back(Job{stage, 2, 4, 0.5, ""});
    all.push_back(Job{stage, 4, 1, 0.5, ""});
  }
  // The shard owner's other optimizers, and one bucket slot instead of two.
  // Adam without weight decay: with L2 decay, Adam turns the rounding noise in the key
  // bias's gradient (exactly zero in exact arithmetic: softmax ignores it) into full
  // steps once the bias is off zero, so any two summation orders drift apart there
  // (plain data parallelism, stage 0 on 2 ranks, drifts the same 8e-5 of the norm).
  const std::string adam = " --set optimizer.type=adam --set optimizer.weight_decay=0";
  const std::string sgd = " --set optimizer.type=sgd --set optimizer.lr=0.05 --set optimizer.momentum=0.9";
  for (const std::string& optimizer : {adam, sgd}) {
    all.push_back(Job{2, 2, 4, 0, optimizer});
    all.push_back(Job{3, 4, 1, 0, optimizer});
  }
  // DeepSpeed's learning-rate schedules, each stepped after every update as it steps them:
  // short warm-ups and cycles, so 20 steps see every phase (OneCycle also cycles Adam's betas).
  const std::string decay =
      " --set scheduler.type=\\\"WarmupDecayLR\\\" --set scheduler.warmup_num_steps=5"
      " --set scheduler.total_num_steps=16 --set scheduler.warmup_max_lr=2e-3"
      " --set scheduler.warmup_type=\\\"linear\\\"";
  const std::string cosine =
      " --set scheduler.type=\\\"WarmupCosineLR\\\" --set scheduler.warmup_num_steps=4"
      " --set scheduler.total_num_steps=20 --set scheduler.warmup_min_ratio=0.1";
  const std::string cycle =
      " --set scheduler.type=\\\"OneCycle\\\" --set scheduler.cycle_min_lr=1e-4"
      " --set scheduler.cycle_max_lr=2e-3 --set scheduler.cycle_first_step_size=6"
      " --set scheduler.decay_lr_rate=0.5 --set scheduler.decay_step_size=2"
      " --set scheduler.decay_mom_rate=0.01";
  const std::string warmup = " --set scheduler.type=\\\"WarmupLR\\\" --set scheduler.warmup_num_steps=8";
  all.push_back(Job{1, 2, 4, 0, decay});
  all.push_back(Job{2, 2, 1, 0.5, cosine});
  all.push_back(Job{3, 2, 4, 0, cycle});
  all.push_back(Job{0, 4, 1, 0.5, warmup});
  all.push_back(Job{0, 2, 1, 0, cycle, "nvme"});
  all.push_back(Job{2, 2, 4, 0, " --set zero.overlap_comm=false"});
  all.push_back(Job{3, 4, 1, 0, " --set zero.overlap_comm=false"});
  // The GPT with its head tied to the token embedding: one tensor in two layers, at every
  // stage and tier.
  for (int stage : {0, 1, 2, 3})
    for (const char* offload : {"none", "cpu", "nvme"})
      for (int accumulation : {1, 4})
        all.push_back(Job{stage, 2, accumulation, 0, " --set model.tie_embeddings=true", offload});
  return all;
}

// "WarmupDecayLR" out of settings holding --set scheduler.type=\"WarmupDecayLR\".
std::string schedule_name(const std::string& settings) {
  const std::size_t start = settings.find("type=\\\"") + 7;
  return settings.substr(start, settings.find('\\', start) - start);
}

INSTANTIATE_TEST_SUITE_P(Zero, Parity, ::testing::ValuesIn(jobs()), [](const auto& info) {
  const Job& j = info.param;
  std::string variant = j.settings.find("adam") != std::string::npos             ? "Adam"
                        : j.settings.find("sgd") != std::string::npos            ? "SgdMomentum"
                        : j.settings.find("overlap") != std::string::npos        ? "OneBucketSlot"
                        : j.settings.find("tie_") != std::string::npos           ? "TiedEmbeddings"
                        : j.settings.find("scheduler.type") != std::string::npos ? schedule_name(j.settings)
                                                                                 : "";
  if (j.offload != "none") variant += j.offload == "cpu" ? "OffloadCpu" : "OffloadNvme";
  return "Stage" + std::to_string(j.stage) + "Dp" + std::to_string(j.dp) + "Accumulation" +
         std::to_string(j.accumulation) + (j.clip > 0 ? "Clipped" : "") + variant;
});

}  // namespace
}  // namespace troupe
