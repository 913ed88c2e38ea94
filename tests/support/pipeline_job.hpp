// A pipeline training job of the tiny GPT for the parity tests (pipeline_test,
// schedules_test): 20 steps on a global batch of 16, run with `troupe run` over real
// processes, and the single-process `--reference` run it is held to.
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"
#include "tests/support/parity.hpp"
#include "tests/support/trained_run.hpp"

namespace troupe::testing {

struct PipelineJob {
  int pp = 2;
  int dp = 1;
  int micro_batches = 4;
  std::string schedule = "1f1b";  ///< a schedule's name, or a schedule table's path (with a '/')
  int zero = 0;
  double clip = 0;
  std::string settings;  ///< more --set flags (partition, order)
  bool tied = false;     ///< [model] tie_embeddings: the head on the last stage uses stage 0's embedding
};

// The --set flags of `settings` that change the model (model.*): the reference needs them too.
inline std::string model_settings(const std::string& settings) {
  std::string out;
  const std::string flag = " --set ";
  for (std::size_t at = settings.find(flag); at != std::string::npos;) {
    const std::size_t next = settings.find(flag, at + flag.size());
    const std::string one = settings.substr(at, next == std::string::npos ? std::string::npos : next - at);
    if (one.compare(flag.size(), 6, "model.") == 0) out += one;
    at = next;
  }
  return out;
}

inline std::string describe(const PipelineJob& j) {
  return "pp " + std::to_string(j.pp) + ", dp " + std::to_string(j.dp) + ", " + j.schedule + ", m " +
         std::to_string(j.micro_batches) + ", zero " + std::to_string(j.zero) +
         (j.clip > 0 ? ", clipping" : "") + (j.tied ? ", tied embeddings" : "") + j.settings;
}

// The job's settings as section.key=value overrides of configs/tiny-gpt.toml: 20 steps
// of the tiny GPT (4 layers: embedding, 2 blocks, head) on a global batch of 16.
inline std::vector<std::string> pipeline_overrides(const PipelineJob& j) {
  const int micro = 16 / j.dp / j.micro_batches;
  return {"train.steps=20",
          "optimizer.lr=1e-3",
          "cluster.world_size=" + std::to_string(j.pp * j.dp),
          "parallel.dp=" + std::to_string(j.dp),
          "parallel.pp=" + std::to_string(j.pp),
          "batch.micro_batch_size=" + std::to_string(micro),
          "batch.gradient_accumulation_steps=" + std::to_string(j.micro_batches),
          "batch.global_batch_size=16",
          j.schedule.find('/') == std::string::npos ? "pipeline.schedule=" + j.schedule
                                                    : "pipeline.schedule_file=\\\"" + j.schedule + "\\\"",
          "zero.stage=" + std::to_string(j.zero),
          "zero.reduce_bucket_size=16384",
          "optimizer.gradient_clipping=" + std::to_string(j.clip),
          std::string("model.tie_embeddings=") + (j.tied ? "true" : "false"),
          "cluster.coordinator=" + free_coordinator()};
}

// `prefix` before each override: " --set " for troupe run, " " for a trainer's own.
inline std::string joined(const std::vector<std::string>& overrides, const std::string& prefix) {
  std::string out;
  for (const auto& o : overrides) out += prefix + o;
  return out;
}

// `environment` prefixes the command (TROUPE_DEVICE_PATH=cpu: the device path on CPU streams).
inline TrainedRun train_pipeline(const std::string& how, const PipelineJob& j,
                                 const std::string& environment = "") {
  std::string dir = make_temp_dir();
  std::string command = environment + " " + TROUPE_BINARY + " run " + TROUPE_SOURCE_DIR +
                        "/configs/tiny-gpt.toml" + how + joined(pipeline_overrides(j), " --set ") +
                        j.settings + " --metrics " + dir + "/metrics.jsonl --parameters-out " + dir +
                        "/parameters.bin";
  auto r = run_command(command, 300);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return read_run(dir + "/metrics.jsonl", dir + "/parameters.bin");
}

// The reference: one process, the whole batch at once, the same model, optimizer and clipping.
inline const TrainedRun& pipeline_reference(double clip, bool tied, const std::string& model = "") {
  static std::map<std::tuple<double, bool, std::string>, TrainedRun> cache;
  auto found = cache.find({clip, tied, model});
  if (found == cache.end()) {
    PipelineJob one{1, 1, 1, "1f1b", 0, clip, model, tied};
    found = cache.emplace(std::make_tuple(clip, tied, model), train_pipeline(" --reference", one)).first;
  }
  return found->second;
}

// Trains `j` and holds it to the reference: losses within 1e-5 relative, gradient norms
// within 1e-4, final parameters within 1e-5 of their norm; prints the worst figures.
inline void expect_pipeline_parity(const PipelineJob& j, const std::string& environment = "") {
  const TrainedRun& ref = pipeline_reference(j.clip, j.tied, model_settings(j.settings));
  TrainedRun run = train_pipeline("", j, environment);
  ParityFigures worst = expect_parity(run, ref, 20, j.clip);
  std::printf(
      "pipeline parity%s: %s: worst loss %.2e relative, gradient norm %.2e, parameters %.2e of their norm\n",
      environment.empty() ? "" : (" (" + environment + ")").c_str(), describe(j).c_str(), worst.loss,
      worst.grad_norm, worst.parameters);
}

// A test name for `j`: pp2_dp1_OneFOneB_m4_zero0 and its settings.
inline std::string test_name(const PipelineJob& j) {
  std::string schedule;
  if (j.schedule.find('/') != std::string::npos) return "table";
  for (std::size_t i = 0; i < j.schedule.size(); ++i)  // zb_h1 -> ZbH1
    if (j.schedule[i] != '_')
      schedule += (i == 0 || j.schedule[i - 1] == '_') ? static_cast<char>(std::toupper(j.schedule[i]))
                                                       : j.schedule[i];
  if (j.schedule == "1f1b") schedule = "OneFOneB";
  if (j.schedule == "gpipe") schedule = "GPipe";
  std::string name = "pp" + std::to_string(j.pp) + "_dp" + std::to_string(j.dp) + "_" + schedule + "_m" +
                     std::to_string(j.micro_batches) + "_zero" + std::to_string(j.zero);
  if (j.clip > 0) name += "_clip";
  if (j.tied) name += "_tied";
  if (j.settings.find("parameters") != std::string::npos) name += "_byParameters";
  if (j.settings.find("profile") != std::string::npos) name += "_profiled";
  if (j.settings.find("[3,1]") != std::string::npos) name += "_explicit";
  if (j.settings.find("dp,pp") != std::string::npos) name += "_dpFastest";
  if (j.settings.find("model.") != std::string::npos) name += "_deeper";
  return name;
}

}  // namespace troupe::testing
